package e2e

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/borrowcycle/borrowcycle/internal/envoyrun"
)

// TestPassthroughAdmitsAndCounts: passthrough mode admits every request and
// counts what enforce mode would have rejected.
func TestPassthroughAdmitsAndCounts(t *testing.T) {
	const capacity, sent = 5, 12
	tg := configuredTarget(t, map[string]any{
		"capacity":      capacity,
		"cycle":         "60s",
		"mode":          "passthrough",
		"debug_headers": true,
	}, startOpts{})
	before, err := tg.flushedStats()
	if err != nil {
		t.Fatal(err)
	}
	c := newClient()
	perCycle := map[string]int64{}
	for i := 0; i < sent; i++ {
		r := tg.get(c, "only")
		if r.err != nil || r.status != 200 || r.body != upstreamBody {
			t.Fatalf("request %d: passthrough must admit, got %v", i, r)
		}
		perCycle[cycleOf(t, r)]++
	}
	after, err := tg.flushedStats()
	if err != nil {
		t.Fatal(err)
	}
	// The only client owns the whole capacity of each share period (60 s
	// windows, so the requests fall in one or two of them, the first
	// planned when the client registered), and every request beyond it
	// would be rejected.
	var wantOver int64
	for _, n := range perCycle {
		wantOver += max(0, n-capacity)
	}
	prefix := "wasmcustom.borrowcycle.default."
	if d := after[prefix+"requests_would_reject.over_limit"] - before[prefix+"requests_would_reject.over_limit"]; d != wantOver {
		t.Errorf("requests_would_reject.over_limit moved by %d, want %d (per cycle %v)", d, wantOver, perCycle)
	}
	for _, reason := range []string{"over_limit", "anonymous", "table_full", "pending", "store_failure", "contended"} {
		name := prefix + "requests_rejected." + reason
		if d := after[name] - before[name]; d != 0 {
			t.Errorf("%s moved by %d in passthrough mode, want 0", name, d)
		}
	}
	if wantOver == 0 {
		t.Errorf("no request was over the share: the test did not exercise passthrough")
	}
}

// TestBadConfigRefusesToStart: a plugin configuration the plugin rejects
// keeps Envoy from starting, and the log names the field.
func TestBadConfigRefusesToStart(t *testing.T) {
	if setup.compose {
		t.Skip("compose target: this test starts its own Envoys")
	}
	cases := []struct {
		field string
		cfg   map[string]any
	}{
		{"capacity", map[string]any{"capacity": 0, "cycle": "10s"}},
		{"cycle", map[string]any{"capacity": 10, "cycle": "169h"}},
		{"reservation", map[string]any{"capacity": 10, "cycle": "10s", "reservation": 1.5}},
		{"mode", map[string]any{"capacity": 10, "cycle": "10s", "mode": "block"}},
	}
	for _, tc := range cases {
		t.Run(tc.field, func(t *testing.T) {
			b := localBootstrap(t, mustJSON(t, tc.cfg))
			e, err := envoyrun.Start(context.Background(), envoyrun.Options{
				Envoy: setup.envoy, Bootstrap: b, Concurrency: 2, Dir: logDir(t), Name: "envoy",
				ReadyTimeout: 60 * time.Second,
			})
			if err == nil {
				e.Stop()
				t.Fatalf("envoy started with %s", mustJSON(t, tc.cfg))
			}
			if !errors.Is(err, envoyrun.ErrExited) {
				t.Fatalf("want envoy to exit, got: %v", err)
			}
			want := "borrowcycle: invalid configuration: " + tc.field + ": "
			if !strings.Contains(err.Error(), want) {
				t.Errorf("log does not contain %q:\n%v", want, err)
			}
			// The Istio tests rely on validate mode running the plugin's
			// configure callback: show here that it rejects the same config.
			raw, err := b.Bytes()
			if err != nil {
				t.Fatal(err)
			}
			out, err := envoyrun.Validate(context.Background(), setup.envoy, raw, logDir(t), "validate")
			if err == nil {
				t.Errorf("envoy --mode validate accepted %s:\n%s", mustJSON(t, tc.cfg), tail(out, 20))
			} else if !strings.Contains(out, want) {
				t.Errorf("envoy --mode validate output does not contain %q:\n%s", want, tail(out, 20))
			}
		})
	}
}

// TestShippedBootstrapValidates: envoy/envoy.yaml, with the module path
// pointed at the build, passes `envoy --mode validate` (which also runs
// the plugin's configure callback on the shipped plugin configuration).
func TestShippedBootstrapValidates(t *testing.T) {
	validateOK(t, localBootstrap(t, ""), "shipped")
}

func validateOK(t *testing.T, b *envoyrun.Bootstrap, name string) {
	t.Helper()
	raw, err := b.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	out, err := envoyrun.Validate(context.Background(), setup.envoy, raw, logDir(t), name)
	if err != nil || !strings.Contains(out, "OK") {
		t.Fatalf("envoy --mode validate failed (%v):\n%s", err, tail(out, 30))
	}
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
