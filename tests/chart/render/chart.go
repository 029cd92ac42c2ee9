package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	semver "github.com/Masterminds/semver/v3"
	yaml "gopkg.in/yaml.v2"
)

// chart is a chart folder read from disk: its metadata, default values, templates (keyed by
// their path under the chart folder, e.g. "templates/router.yaml") and the other files that
// .Files exposes.
type chart struct {
	name      string
	metadata  map[string]interface{} // Chart.yaml with Helm's field names (.Chart.AppVersion)
	values    map[string]interface{}
	templates map[string]string
	files     files
}

// Helm exposes Chart.yaml through a Go struct; these are the field names templates see.
var chartFieldNames = map[string]string{
	"apiVersion": "APIVersion", "name": "Name", "version": "Version",
	"appVersion": "AppVersion", "description": "Description", "type": "Type",
	"kubeVersion": "KubeVersion", "keywords": "Keywords", "home": "Home",
	"sources": "Sources", "maintainers": "Maintainers", "icon": "Icon",
	"annotations": "Annotations", "deprecated": "Deprecated",
}

func loadChart(dir string) (*chart, error) {
	raw, err := os.ReadFile(filepath.Join(dir, "Chart.yaml"))
	if err != nil {
		return nil, err
	}
	meta, err := decodeYAML(raw)
	if err != nil {
		return nil, fmt.Errorf("Chart.yaml: %w", err)
	}
	ch := &chart{metadata: map[string]interface{}{}, templates: map[string]string{}, files: files{}}
	for k, v := range meta {
		if name, ok := chartFieldNames[k]; ok {
			ch.metadata[name] = v
		} else {
			return nil, fmt.Errorf("Chart.yaml: unknown field %q", k)
		}
	}
	name, _ := ch.metadata["Name"].(string)
	if name == "" {
		return nil, fmt.Errorf("Chart.yaml: name is required")
	}
	if v, _ := ch.metadata["Version"].(string); v == "" {
		return nil, fmt.Errorf("Chart.yaml: version is required")
	} else if _, err := semver.StrictNewVersion(v); err != nil {
		return nil, fmt.Errorf("Chart.yaml: version %q is not SemVer 2: %v", v, err)
	}
	ch.name = name

	ch.values = map[string]interface{}{}
	if raw, err := os.ReadFile(filepath.Join(dir, "values.yaml")); err == nil {
		if ch.values, err = decodeYAML(raw); err != nil {
			return nil, fmt.Errorf("values.yaml: %w", err)
		}
	}

	ignore := readHelmignore(dir)
	err = filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		if rel == "." {
			return nil
		}
		// Follow symlinks (Helm does too): a linked folder is walked like a real one.
		if info.Mode()&os.ModeSymlink != 0 {
			target, err := filepath.EvalSymlinks(p)
			if err != nil {
				return fmt.Errorf("symlink %s: %w", rel, err)
			}
			if st, err := os.Stat(target); err == nil && st.IsDir() {
				return walkInto(target, rel, ch, ignore)
			}
		}
		if info.IsDir() {
			if ignore.match(rel, true) {
				return filepath.SkipDir
			}
			return nil
		}
		return addFile(p, rel, ch, ignore)
	})
	return ch, err
}

func walkInto(target, relBase string, ch *chart, ignore helmignore) error {
	return filepath.Walk(target, func(p string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(target, p)
		return addFile(p, path.Join(relBase, filepath.ToSlash(rel)), ch, ignore)
	})
}

// addFile sorts a chart file the way Helm's loader does: templates/ become templates, the
// metadata files are read above, everything else is a .Files entry.
func addFile(p, rel string, ch *chart, ignore helmignore) error {
	if ignore.match(rel, false) {
		return nil
	}
	data, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	switch {
	case strings.HasPrefix(rel, "templates/"):
		ch.templates[rel] = string(data)
	case rel == "Chart.yaml" || rel == "values.yaml" || rel == "values.schema.json" ||
		rel == "Chart.lock" || strings.HasPrefix(rel, "charts/"):
	default:
		ch.files[rel] = data
	}
	return nil
}

// helmignore holds .helmignore patterns: blank lines and # comments skipped, a trailing "/"
// matches folders only, a pattern matches the whole path or its base name (path.Match).
type helmignore []string

func readHelmignore(dir string) helmignore {
	var pats helmignore
	f, err := os.Open(filepath.Join(dir, ".helmignore"))
	if err != nil {
		return nil
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line != "" && !strings.HasPrefix(line, "#") {
			pats = append(pats, line)
		}
	}
	return pats
}

func (h helmignore) match(rel string, isDir bool) bool {
	for _, pat := range h {
		dirOnly := strings.HasSuffix(pat, "/")
		pat = strings.TrimSuffix(pat, "/")
		if dirOnly && !isDir {
			continue
		}
		if ok, _ := path.Match(pat, rel); ok {
			return true
		}
		if ok, _ := path.Match(pat, path.Base(rel)); ok {
			return true
		}
	}
	return false
}

// decodeYAML reads YAML the way Helm does (sigs.k8s.io/yaml): through JSON, so maps have
// string keys and every number is a float64.
func decodeYAML(raw []byte) (map[string]interface{}, error) {
	var v interface{}
	if err := yaml.Unmarshal(raw, &v); err != nil {
		return nil, err
	}
	j, err := json.Marshal(jsonable(v))
	if err != nil {
		return nil, err
	}
	out := map[string]interface{}{}
	if string(j) == "null" {
		return out, nil
	}
	if err := json.Unmarshal(j, &out); err != nil {
		return nil, fmt.Errorf("top level is not a map: %w", err)
	}
	return out, nil
}

// jsonable turns yaml.v2's map[interface{}]interface{} into map[string]interface{}.
func jsonable(v interface{}) interface{} {
	switch t := v.(type) {
	case map[interface{}]interface{}:
		m := make(map[string]interface{}, len(t))
		for k, val := range t {
			m[fmt.Sprint(k)] = jsonable(val)
		}
		return m
	case []interface{}:
		for i := range t {
			t[i] = jsonable(t[i])
		}
	}
	return v
}

func loadValues(ch *chart, files []string) (map[string]interface{}, error) {
	merged := ch.values
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		user, err := decodeYAML(raw)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		merged = coalesce(user, merged)
	}
	return merged, nil
}

// coalesce merges user values over defaults as Helm does: maps merge key by key, any other
// user value replaces the default, and a user null removes the key.
func coalesce(user, defaults map[string]interface{}) map[string]interface{} {
	out := map[string]interface{}{}
	for k, v := range defaults {
		out[k] = v
	}
	for k, v := range user {
		if v == nil {
			delete(out, k)
			continue
		}
		um, uok := v.(map[string]interface{})
		dm, dok := out[k].(map[string]interface{})
		if uok && dok {
			out[k] = coalesce(um, dm)
		} else {
			out[k] = v
		}
	}
	return out
}

type releaseInfo struct {
	Name, Namespace, Service string
	IsInstall, IsUpgrade     bool
	Revision                 int
}

type kubeVersion struct{ Version, Major, Minor, GitVersion string }

func (k kubeVersion) String() string { return k.Version }

type apiVersions []string

// Has reports whether the cluster serves apiVersion ("group/version" or
// "group/version/Kind"), as Helm's .Capabilities.APIVersions.Has does.
func (a apiVersions) Has(v string) bool {
	for _, x := range a {
		if x == v {
			return true
		}
	}
	return false
}

type capabilitiesInfo struct {
	KubeVersion kubeVersion
	APIVersions apiVersions
}

// capabilities describes a cluster with the built-in API groups the chart's kinds use, plus
// the extra versions given (for example monitoring.coreos.com/v1).
func capabilities(version string, extra []string) capabilitiesInfo {
	v := semver.MustParse(version)
	apis := apiVersions{"v1", "apps/v1", "policy/v1", "batch/v1", "networking.k8s.io/v1"}
	apis = append(apis, extra...)
	sort.Strings(apis)
	return capabilitiesInfo{
		KubeVersion: kubeVersion{Version: "v" + v.String(), Major: fmt.Sprint(v.Major()),
			Minor: fmt.Sprint(v.Minor()), GitVersion: "v" + v.String()},
		APIVersions: apis,
	}
}

func topLevel(ch *chart, values map[string]interface{}, rel releaseInfo,
	caps capabilitiesInfo) map[string]interface{} {
	rel.Service, rel.IsInstall, rel.Revision = "Helm", true, 1
	return map[string]interface{}{
		"Values":       values,
		"Release":      rel,
		"Chart":        ch.metadata,
		"Capabilities": caps,
		"Files":        ch.files,
	}
}

// trimmedEmpty reports whether a rendered template holds nothing but whitespace and YAML
// document separators, which Helm leaves out of its output.
func trimmedEmpty(s string) bool {
	return len(bytes.TrimSpace([]byte(strings.ReplaceAll(s, "---", "")))) == 0
}
