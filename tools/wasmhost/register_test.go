package wasmhost

import "testing"

// Clients that fill the table exactly register within a few rounds of
// requests on four VMs: a VM that refused a client table_full, which
// another VM's re-plan has counted since, reads the table again rather
// than refusing the client from memory until the window's end. (Before,
// 19 of 2,000 were still refused after six rounds.)
func TestClientsFillingTheTableRegister(t *testing.T) {
	scaleHostWithin(t, 2000, 5)
}
