package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path"
	"sort"
	"strings"
	"text/template"

	sprig "github.com/Masterminds/sprig/v3"
	yaml "gopkg.in/yaml.v2"
)

// files is .Files: chart files outside templates/, keyed by their path in the chart.
type files map[string][]byte

func (f files) GetBytes(name string) []byte { return f[name] }
func (f files) Get(name string) string      { return string(f[name]) }

// Glob returns the files whose path matches pattern (path.Match: "*" stays within a folder).
func (f files) Glob(pattern string) files {
	out := files{}
	for name, data := range f {
		if ok, _ := path.Match(pattern, name); ok {
			out[name] = data
		}
	}
	return out
}

// AsConfig renders the files as ConfigMap data: base name -> content.
func (f files) AsConfig() string {
	m := map[string]string{}
	for name, data := range f {
		m[path.Base(name)] = string(data)
	}
	s, _ := toYAML(m)
	return s
}

func (f files) Lines(name string) []string {
	s := strings.TrimSuffix(string(f[name]), "\n")
	if s == "" {
		return []string{}
	}
	return strings.Split(s, "\n")
}

// toYAML marshals as Helm's toYaml does (JSON first, then YAML with sorted keys, no trailing
// newline).
func toYAML(v interface{}) (string, error) {
	j, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	var generic interface{}
	if err := yaml.Unmarshal(j, &generic); err != nil {
		return "", err
	}
	out, err := yaml.Marshal(generic)
	if err != nil {
		return "", err
	}
	return strings.TrimSuffix(string(out), "\n"), nil
}

// funcMap is sprig's text functions with Helm's additions. include and tpl are bound to the
// template set later (they need it), as Helm does.
func funcMap() template.FuncMap {
	f := sprig.TxtFuncMap()
	delete(f, "env") // Helm removes these: a chart must not read the renderer's environment.
	delete(f, "expandenv")
	f["toYaml"] = func(v interface{}) string {
		s, err := toYAML(v)
		if err != nil {
			return "" // Helm's toYaml also swallows the error.
		}
		return s
	}
	f["fromYaml"] = func(s string) map[string]interface{} {
		m, err := decodeYAML([]byte(s))
		if err != nil {
			return map[string]interface{}{"Error": err.Error()}
		}
		return m
	}
	f["toJson"] = func(v interface{}) string {
		b, err := json.Marshal(v)
		if err != nil {
			return ""
		}
		return string(b)
	}
	f["fromJson"] = func(s string) map[string]interface{} {
		m := map[string]interface{}{}
		if err := json.Unmarshal([]byte(s), &m); err != nil {
			m["Error"] = err.Error()
		}
		return m
	}
	f["required"] = func(msg string, v interface{}) (interface{}, error) {
		if v == nil {
			return nil, fmt.Errorf("%s", msg)
		}
		if s, ok := v.(string); ok && s == "" {
			return nil, fmt.Errorf("%s", msg)
		}
		return v, nil
	}
	// `helm template` has no cluster to look objects up in; lookup returns an empty map there.
	f["lookup"] = func(apiVersion, kind, namespace, name string) map[string]interface{} {
		return map[string]interface{}{}
	}
	f["include"] = func(string, interface{}) (string, error) { return "", nil }
	f["tpl"] = func(string, interface{}) (string, error) { return "", nil }
	return f
}

// render executes every template of the chart against top, as `helm template` would.
func render(ch *chart, top map[string]interface{}, notes bool) (string, error) {
	root := template.New("chart").Option("missingkey=zero")
	funcs := funcMap()
	includeDepth := 0
	funcs["include"] = func(name string, data interface{}) (string, error) {
		includeDepth++
		defer func() { includeDepth-- }()
		if includeDepth > 1000 {
			return "", fmt.Errorf("include %q: recursion deeper than 1000", name)
		}
		var buf bytes.Buffer
		if err := root.ExecuteTemplate(&buf, name, data); err != nil {
			return "", err
		}
		return buf.String(), nil
	}
	funcs["tpl"] = func(text string, data interface{}) (string, error) {
		t, err := root.Clone()
		if err != nil {
			return "", err
		}
		t, err = t.New("tpl").Parse(text)
		if err != nil {
			return "", fmt.Errorf("tpl: %w", err)
		}
		var buf bytes.Buffer
		if err := t.Execute(&buf, data); err != nil {
			return "", fmt.Errorf("tpl: %w", err)
		}
		return strings.ReplaceAll(buf.String(), "<no value>", ""), nil
	}
	root.Funcs(funcs)

	names := make([]string, 0, len(ch.templates))
	for rel := range ch.templates {
		names = append(names, rel)
	}
	sort.Strings(names)
	for _, rel := range names {
		full := ch.name + "/" + rel
		if _, err := root.New(full).Parse(ch.templates[rel]); err != nil {
			return "", fmt.Errorf("parse error in %s: %w", full, err)
		}
	}

	var out strings.Builder
	for _, rel := range names {
		base := path.Base(rel)
		isNotes := rel == "templates/NOTES.txt"
		if strings.HasPrefix(base, "_") || isNotes != notes {
			continue
		}
		full := ch.name + "/" + rel
		ctx := map[string]interface{}{}
		for k, v := range top {
			ctx[k] = v
		}
		ctx["Template"] = map[string]interface{}{"Name": full, "BasePath": ch.name + "/templates"}
		var buf bytes.Buffer
		if err := root.ExecuteTemplate(&buf, full, ctx); err != nil {
			return "", fmt.Errorf("execution error in %s: %w", full, err)
		}
		text := strings.ReplaceAll(buf.String(), "<no value>", "")
		if trimmedEmpty(text) {
			continue
		}
		if notes {
			out.WriteString(text)
			continue
		}
		fmt.Fprintf(&out, "---\n# Source: %s\n%s\n", full, strings.TrimRight(text, "\n"))
	}
	return out.String(), nil
}
