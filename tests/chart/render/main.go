// Command chart-render renders a Helm chart the way `helm template` does, for machines that
// have Go and sprig (Debian packages) but no Helm. It implements the subset of Helm's
// template environment that charts/mlaserve uses, and no more:
//
//   - objects: .Values, .Release, .Chart, .Capabilities (KubeVersion, APIVersions.Has),
//     .Template (Name, BasePath), .Files (Get, GetBytes, Glob, AsConfig, Lines);
//   - functions: sprig's text functions (without env/expandenv, as in Helm), include, tpl,
//     required, toYaml, fromYaml, toJson, fromJson, lookup (always empty, as in `helm
//     template`);
//   - values: the chart's values.yaml, then each -f file merged over it (maps merge
//     recursively, null deletes a key), numbers decoded as float64 as Helm does;
//   - output: every non-partial template under templates/ (recursively), skipping empty
//     results, each preceded by "# Source: <chart>/templates/<file>"; NOTES.txt only with
//     --notes.
//
// Not implemented: subcharts, .Files.Glob "**" patterns, --set, schema validation (the
// Python tests validate values against values.schema.json), hooks ordering.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
)

type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

func main() {
	var valueFiles, apiVersions stringList
	chartDir := flag.String("chart", "", "chart folder (holds Chart.yaml)")
	release := flag.String("release", "release-name", "release name")
	namespace := flag.String("namespace", "default", "release namespace")
	kubeVersion := flag.String("kube-version", "v1.30.0", "Kubernetes version for .Capabilities")
	notes := flag.Bool("notes", false, "render templates/NOTES.txt instead of the manifests")
	flag.Var(&valueFiles, "f", "values file merged over the chart's values.yaml (repeatable)")
	flag.Var(&apiVersions, "api-versions", "extra API version for .Capabilities.APIVersions (repeatable)")
	flag.Parse()
	if *chartDir == "" {
		fmt.Fprintln(os.Stderr, "chart-render: --chart is required")
		os.Exit(2)
	}

	ch, err := loadChart(*chartDir)
	if err == nil {
		var values map[string]interface{}
		values, err = loadValues(ch, valueFiles)
		if err == nil {
			top := topLevel(ch, values, releaseInfo{Name: *release, Namespace: *namespace},
				capabilities(*kubeVersion, apiVersions))
			var out string
			out, err = render(ch, top, *notes)
			if err == nil {
				fmt.Print(out)
			}
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "Error: %v\n", err)
		os.Exit(1)
	}
}
