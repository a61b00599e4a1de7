//go:build !wasm

package host

import (
	"strings"
	"testing"
)

// The adapter's part of client_id: it hands the filter the header's copies
// and the properties Envoy sets (set here on the emulator under the same
// paths), under both runners, the compiled module included.

// record is the access-log record the plugin set for the last request.
func (h *host) record() string {
	h.t.Helper()
	v, err := h.GetProperty([]string{"borrowcycle"})
	if err != nil {
		h.t.Fatalf("access-log property: %v", err)
	}
	return string(v)
}

func TestClientIDFromProperties(t *testing.T) {
	const jwtSub = "envoy.filters.http.jwt_authn"
	cases := []struct {
		name, clientID string
		path           []string
		value, id      string
	}{
		{"source_address", `{"from": "source_address"}`, []string{"source", "address"}, "[2001:db8::7]:5555", "2001:db8::7"},
		{"peer_principal", `{"from": "peer_principal"}`, []string{"connection", "uri_san_peer_certificate"}, "spiffe://cluster.local/ns/a/sa/one", "spiffe://cluster.local/ns/a/sa/one"},
		{"metadata", `{"from": "metadata", "filter": "` + jwtSub + `", "path": ["payload", "sub"]}`,
			[]string{"metadata", "filter_metadata", jwtSub, "payload", "sub"}, "alice", "alice"},
	}
	for i, c := range cases {
		name := "ids" + string(rune('a'+i))
		config := `{"capacity": 10, "cycle": "10s", "log_client_id": true, "name": "` + name + `", "client_id": ` + c.clientID + `}`
		t.Run(c.name, func(t *testing.T) {
			eachRunner(t, func(t *testing.T, runner string) {
				t.Run("absent", func(t *testing.T) {
					// A fresh host has no such property: anonymous, whatever
					// header the caller sends.
					h := startHost(t, runner, config)
					r := h.from("forged")
					if r.local == nil || r.headers["x-borrowcycle-reason"] != "anonymous" {
						t.Fatalf("without the property: %+v", r)
					}
					if !strings.HasPrefix(string(r.local.Data), "borrowcycle: anonymous: ") {
						t.Errorf("body %q", r.local.Data)
					}
				})
				t.Run("present", func(t *testing.T) {
					h := startHost(t, runner, config)
					if err := h.SetProperty(c.path, []byte(c.value)); err != nil {
						t.Fatal(err)
					}
					if r := h.from("forged"); !r.admitted() {
						t.Fatalf("with the property: %+v", r.local)
					}
					if rec := h.record(); !strings.HasSuffix(rec, " id="+c.id) {
						t.Errorf("record %q, want the id %q", rec, c.id)
					}
				})
			})
		})
	}
}

func TestDuplicateHeaderIsAmbiguous(t *testing.T) {
	eachRunner(t, func(t *testing.T, runner string) {
		h := startHost(t, runner, `{"capacity": 10, "cycle": "10s", "name": "dup"}`)
		r := h.request([2]string{"x-client-id", "alice"}, [2]string{"x-client-id", "bob"})
		if r.local == nil || r.local.StatusCode != 429 {
			t.Fatalf("two id headers admitted: %+v", r)
		}
		if got, want := string(r.local.Data), "borrowcycle: ambiguous_id: the client id header appears more than once\n"; got != want {
			t.Errorf("body %q, want %q", got, want)
		}
		checkHeaders(t, r.headers, map[string]string{"x-borrowcycle-reason": "ambiguous_id"})
		for _, absent := range []string{"retry-after", "x-envoy-ratelimited", "x-ratelimit-limit"} {
			if _, ok := r.headers[absent]; ok {
				t.Errorf("ambiguous_id reply has %s", absent)
			}
		}
		if rec := h.record(); !strings.Contains(rec, "reason=ambiguous_id") || !strings.HasSuffix(rec, "client=-") {
			t.Errorf("record %q", rec)
		}
		// One copy, with other headers around it, is an id.
		if r := h.request([2]string{"x-other", "1"}, [2]string{"x-client-id", "alice"}, [2]string{"x-client-id-2", "b"}); !r.admitted() {
			t.Errorf("one copy refused: %+v", r.local)
		}
		h.flushMetrics()
		h.checkCounters("borrowcycle.dup.", map[string]uint64{
			"requests_rejected.ambiguous_id": 1, "requests_rejected.anonymous": 0, "requests_allowed": 1,
		})
	})
}
