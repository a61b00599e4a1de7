// Command plugin is Borrowcycle's Envoy HTTP filter as a proxy-wasm module,
// built with GOOS=wasip1 GOARCH=wasm -buildmode=c-shared. It only registers
// the VM context: the filter is package plugin/filter, its proxy-wasm
// adapter package plugin/filter/host, and the limiter package engine.
package main

import (
	"github.com/borrowcycle/borrowcycle/plugin/filter/host"
	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm"
)

// main is never called: a c-shared wasip1 module is started with _initialize,
// which runs init.
func main() {}

func init() { proxywasm.SetVMContext(host.NewVMContext()) }
