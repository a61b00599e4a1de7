module github.com/borrowcycle/borrowcycle

go 1.24

require (
	github.com/hashicorp/go-retryablehttp v0.7.8
	github.com/proxy-wasm/proxy-wasm-go-sdk v0.0.0-20260105142703-44c7d5847745
	github.com/tetratelabs/wazero v1.9.0
	golang.org/x/sys v0.33.0
	golang.org/x/time v0.11.0
	gopkg.in/yaml.v3 v3.0.1
)

require (
	github.com/hashicorp/go-cleanhttp v0.5.2 // indirect
	github.com/stretchr/testify v1.10.0 // indirect
)
