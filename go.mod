module github.com/borrowcycle/borrowcycle

go 1.24

require (
	github.com/proxy-wasm/proxy-wasm-go-sdk v0.0.0-20260105142703-44c7d5847745 // indirect
	github.com/stretchr/testify v1.10.0 // indirect
	github.com/tetratelabs/wazero v1.9.0 // indirect
	golang.org/x/time v0.11.0 // indirect
)
