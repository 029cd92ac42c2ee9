// chart-render: renders charts/mlaserve the way `helm template` does, for CI machines without
// Helm. Built offline against Debian's Go packages (/usr/share/gocode) through a generated
// vendor/ tree (see build_renderer.sh); the versions below are the Debian 12 package versions.
module mlaserve.dev/chartrender

go 1.19

require (
	github.com/Masterminds/goutils v1.1.1
	github.com/Masterminds/semver/v3 v3.2.0
	github.com/Masterminds/sprig/v3 v3.2.3
	github.com/google/uuid v1.3.0
	github.com/huandu/xstrings v1.3.3
	github.com/imdario/mergo v0.3.12
	github.com/mitchellh/copystructure v1.2.0
	github.com/mitchellh/reflectwalk v1.0.1
	github.com/shopspring/decimal v1.2.0
	github.com/spf13/cast v1.5.0
	golang.org/x/crypto v0.4.0
	gopkg.in/yaml.v2 v2.4.0
)
