package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/borrowcycle/borrowcycle/internal/envoyrun"
)

// rawGet sends one HTTP/1.1 request with the header line exactly as given
// (bytes net/http refuses to send) and returns the response.
func rawGet(url, headerLine string) (*http.Response, string, error) {
	addr := strings.TrimPrefix(url, "http://")
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(15 * time.Second))
	req := "GET / HTTP/1.1\r\nHost: e2e\r\n" + headerLine + "\r\nConnection: close\r\n\r\n"
	if _, err := io.WriteString(conn, req); err != nil {
		return nil, "", err
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return nil, "", err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(body), err
}

// TestHostileInputKeepsServing: huge and binary client ids and a flood of
// distinct ids do not disturb a registered client, and the plugin neither
// traps nor lets its client table grow past max_clients.
func TestHostileInputKeepsServing(t *testing.T) {
	const maxClients = 1000
	tg := configuredTarget(t, map[string]any{
		"capacity":    1000000, // a share of at least 1000 even with the table full
		"cycle":       "60s",
		"max_clients": maxClients,
	}, startOpts{edit: func(b *envoyrun.Bootstrap) error {
		// Let a 100 KB header through Envoy's own 60 KB default, so that
		// the plugin, not Envoy, has to deal with it.
		return b.SetMaxRequestHeadersKB(200)
	}})
	s := tg.settings
	steadyClient := newClient()
	tg.registerAll(t, []string{"steady"})

	// The steady client keeps sending while the hostile traffic runs.
	stop := make(chan struct{})
	var steady []result
	var steadyWG sync.WaitGroup
	steadyWG.Add(1)
	go func() {
		defer steadyWG.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			steady = append(steady, tg.get(steadyClient, "steady"))
		}
	}()

	var hostile sync.WaitGroup
	hostile.Add(3)
	go func() { defer hostile.Done(); hugeIDs(t, tg) }()
	go func() { defer hostile.Done(); binaryIDs(t, tg) }()
	go func() { defer hostile.Done(); manyIDs(t, tg, 10000) }()
	hostile.Wait()
	close(stop)
	steadyWG.Wait()

	bad := 0
	for _, r := range steady {
		if r.err != nil || r.status != 200 {
			bad++
			if bad <= 5 {
				t.Errorf("steady client refused during the hostile traffic: %v", r)
			}
		}
	}
	if len(steady) == 0 {
		t.Errorf("the steady client sent nothing during the hostile traffic")
	}
	if r := tg.get(steadyClient, "steady"); r.status != 200 {
		t.Errorf("steady client refused after the hostile traffic: %v", r)
	}
	st, err := tg.flushedStats()
	if err != nil {
		t.Fatal(err)
	}
	if n := st["wasmcustom.borrowcycle."+s.Name+".clients_active"]; n < 1 || n > maxClients {
		t.Errorf("clients_active = %d, want within [1, max_clients %d]", n, maxClients)
	}
	t.Logf("steady client: %d requests, %d refused", len(steady), bad)
}

// hugeIDs sends 100 KB client ids: longer than max_client_id_bytes, so
// anonymous.
func hugeIDs(t *testing.T, tg *target) {
	c := newClient()
	id := strings.Repeat("x", 100*1024)
	for i := 0; i < 20; i++ {
		r := tg.get(c, id)
		checkAnonymous(t, tg.settings, r)
	}
}

// binaryIDs sends ids with bytes outside printable ASCII. Envoy itself
// refuses control bytes (400); what it lets through, the plugin must treat
// as an id or as anonymous, never fail on.
func binaryIDs(t *testing.T, tg *target) {
	h := tg.settings.ClientHeader
	values := []string{
		"\x80\x81\xfe\xff",
		"caf\xc3\xa9-\xe2\x98\x83",
		"\xff\xfe\xfd" + strings.Repeat("\x9f", 200),
		"a\x01b",
		"a\x00b",
		"a\x7fb",
	}
	outcomes := map[string]int{}
	defer func() { t.Logf("binary ids: %v", outcomes) }()
	for i, v := range values {
		for k := 0; k < 3; k++ {
			resp, body, err := rawGet(tg.url, h+": "+v)
			if err != nil {
				// Envoy may close the connection on a malformed request.
				outcomes["connection closed"]++
				continue
			}
			outcomes[fmt.Sprintf("%d %s", resp.StatusCode, resp.Header.Get("x-borrowcycle-reason"))]++
			switch resp.StatusCode {
			case 200, 400:
			case int(tg.settings.StatusCode):
				if reason := resp.Header.Get("x-borrowcycle-reason"); reason != "pending" && reason != "anonymous" && reason != "table_full" {
					t.Errorf("binary id %d: rejected with reason %q: %s", i, reason, body)
				}
			default:
				t.Errorf("binary id %d (%q): status %d: %s", i, v, resp.StatusCode, body)
			}
		}
	}
}

// manyIDs sends one request from each of n distinct ids, from 16
// connections, and checks that every answer is an admission or a newcomer's
// rejection.
func manyIDs(t *testing.T, tg *target, n int) {
	const conns = 16
	var next atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	counts := map[string]int{}
	for k := 0; k < conns; k++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := newClient()
			for {
				i := next.Add(1)
				if i > int64(n) {
					return
				}
				r := tg.get(c, fmt.Sprintf("flood-%05d", i))
				key := fmt.Sprint(r.status)
				switch {
				case r.err != nil:
					key = "error"
					t.Errorf("flood request failed: %v", r.err)
				case r.status == 200:
				case r.reason() == "pending" || r.reason() == "table_full":
					key = r.reason()
				default:
					t.Errorf("flood id %d: %v", i, r)
				}
				mu.Lock()
				counts[key]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	t.Logf("flood of %d ids: %v", n, counts)
}
