package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/borrowcycle/borrowcycle/engine"
	"github.com/borrowcycle/borrowcycle/internal/envoyrun"
)

// ldsTarget is a local Envoy whose ingress listener comes from a file-based
// LDS source, so that a test can reconfigure the plugin as a control plane
// would: by replacing the file.
type ldsTarget struct {
	*target
	file     string
	listener map[string]any
}

func startLDS(t *testing.T, pluginConfig string) *ldsTarget {
	t.Helper()
	if setup.compose {
		t.Skip("compose target: this test reconfigures its own Envoy")
	}
	s, err := parseSettings(pluginConfig)
	if err != nil {
		t.Fatal(err)
	}
	dir := logDir(t)
	lt := &ldsTarget{file: filepath.Join(dir, "lds.yaml")}
	e, err := envoyrun.Start(context.Background(), envoyrun.Options{
		Envoy: setup.envoy, Bootstrap: localBootstrap(t, pluginConfig), Concurrency: 2, Dir: dir, Name: "envoy",
		// A replaced listener drains for a second: until then its plugin
		// contexts still serve and tick, and may plan a window with the
		// old configuration (docs/contract.md, reconfiguration).
		DrainTime: time.Second,
		Render: func(b *envoyrun.Bootstrap, _ envoyrun.Ports) error {
			l, err := b.IngressToLDS(lt.file)
			if err != nil {
				return err
			}
			lt.listener = l
			return envoyrun.WriteLDS(lt.file, l)
		},
	})
	if err != nil {
		t.Fatalf("start envoy: %v", err)
	}
	lt.target = &target{url: e.URL, admin: e.AdminURL, settings: s, envoy: e}
	t.Cleanup(func() { lt.finish(t) })
	return lt
}

// waitDrained waits until no replaced listener is draining any more (its
// plugin contexts are gone with it), and returns when that was seen.
func (lt *ldsTarget) waitDrained(t *testing.T) time.Time {
	t.Helper()
	for range 100 {
		st, err := fetchStats(lt.admin)
		if err != nil {
			t.Fatal(err)
		}
		if st["listener_manager.total_listeners_draining"] == 0 {
			return time.Now()
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatal("the replaced listener still drains after 10 s")
	return time.Time{}
}

// push replaces the LDS file with the listener running pluginConfig and
// waits until Envoy has taken the update ("update_success") or refused it
// ("update_rejected"); it returns which.
func (lt *ldsTarget) push(t *testing.T, pluginConfig string) string {
	t.Helper()
	before, err := fetchStats(lt.admin)
	if err != nil {
		t.Fatal(err)
	}
	if err := envoyrun.SetListenerPluginConfig(lt.listener, pluginConfig); err != nil {
		t.Fatal(err)
	}
	if err := envoyrun.WriteLDS(lt.file, lt.listener); err != nil {
		t.Fatal(err)
	}
	for range 300 {
		st, err := fetchStats(lt.admin)
		if err != nil {
			t.Fatal(err)
		}
		for _, outcome := range []string{"update_success", "update_rejected"} {
			name := "listener_manager.lds." + outcome
			if st[name] > before[name] {
				return outcome
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("Envoy took no LDS update within 30s of writing %s", lt.file)
	return ""
}

// TestReconfigureByLDS reconfigures a running Envoy (--concurrency 2) the
// way a control plane does: a capacity change mid-window takes effect from
// the next window without letting the current one exceed the old
// capacity; an invalid configuration is refused while the old one keeps
// serving; a second limit added by reload starts serving.
func TestReconfigureByLDS(t *testing.T) {
	const cycle = 4 * time.Second
	config := func(capacity int, extra string) string {
		return fmt.Sprintf(`{"capacity": %d, "cycle": "4s", "debug_headers": true%s}`, capacity, extra)
	}
	lt := startLDS(t, config(10, ""))
	c := newClient()
	lt.register(t, c, "acme")

	// Use the share up in the current cycle.
	var last result
	for range 30 {
		last = lt.get(c, "acme")
		if last.status == 429 {
			break
		}
	}
	if last.status != 429 || last.reason() != "over_limit" {
		t.Fatalf("30 requests over a capacity of 10 never hit over_limit; last: %v", last)
	}
	window := cycleOf(t, last)
	// The reset header is whole seconds rounded up, so the window lasts
	// at least until this.
	windowEnd := last.sent.Add(time.Duration(atoi(last.header.Get("retry-after"))-1) * time.Second)

	t.Run("capacity change applies from the next window", func(t *testing.T) {
		if got := lt.push(t, config(20, "")); got != "update_success" {
			t.Fatalf("capacity 20: %s", got)
		}
		c.CloseIdleConnections() // new connections reach the new listener
		c = newClient()
		drained := lt.waitDrained(t)
		admitted := map[string]int{}
		deadline := time.Now().Add(4*cycle + 10*time.Second)
		for time.Now().Before(deadline) {
			r := lt.get(c, "acme")
			if r.err != nil {
				t.Fatal(r.err)
			}
			cyc := cycleOf(t, r)
			if r.status == 200 {
				admitted[cyc]++
				if cyc == window || r.recv.Before(windowEnd) {
					t.Fatalf("admitted in the window the old capacity had used up (cycle %s, ends after %s): %v",
						window, windowEnd.Format(time.StampMilli), r)
				}
				// A window the old listener planned before it drained
				// keeps the old capacity; so may the next, because the old
				// plugin context can still tick (and plan) for a moment
				// after its listener's drain ends (seen once in CI). Every
				// window after that has the new capacity.
				_, start, _ := engine.WindowAt(r.sent, cycle, 0)
				if limit := r.header.Get("x-ratelimit-limit"); limit != "20" && !start.Before(drained.Add(cycle)) {
					t.Fatalf("admitted after the reload with limit %s, want the new capacity 20: %v", limit, r)
				}
			}
			if admitted[cyc] > 20 {
				t.Fatalf("cycle %s admitted %d over a capacity of 20", cyc, admitted[cyc])
			}
			if admitted[cyc] == 20 {
				return // the new capacity, in full, in a later window
			}
			if r.status == 429 {
				time.Sleep(50 * time.Millisecond)
			}
		}
		t.Fatalf("no window admitted the new capacity of 20 within %s: %v", 4*cycle+10*time.Second, admitted)
	})

	t.Run("invalid configuration is refused, the old one serves", func(t *testing.T) {
		bad := config(20, `, "limits": [{"name": "export", "cost": 0}]`)
		if got := lt.push(t, bad); got != "update_rejected" {
			t.Fatalf("%s: %s, want update_rejected", bad, got)
		}
		want := "borrowcycle: invalid configuration: limits[0].cost: must be an integer in [1, 1048576], got 0"
		if !strings.Contains(lt.envoy.Log(), want) {
			t.Errorf("log does not name the field: want %q in\n%s", want, lt.envoy.LogTail(20))
		}
		c.CloseIdleConnections()
		r := lt.get(newClient(), "acme")
		if r.header.Get("x-ratelimit-limit") != "20" {
			t.Errorf("after the refused update: %v, want the capacity-20 configuration serving", r)
		}
	})

	t.Run("a second limit added by reload serves", func(t *testing.T) {
		two := config(20, `, "limits": [{"name": "export", "cost": 5, "match": {"path_prefix": "/export"}}, {"name": "default"}]`)
		if got := lt.push(t, two); got != "update_success" {
			t.Fatalf("%s: %s", two, got)
		}
		c.CloseIdleConnections()
		c = newClient()
		var r result
		for range 50 {
			r = get(c, lt.url+"/export", "x-client-id", ptr("acme"))
			if r.reason() != "pending" {
				break
			}
			time.Sleep(cycle / 20)
		}
		if r.status != 200 || r.header.Get("x-ratelimit-limit") != "20" || r.header.Get("x-ratelimit-remaining") != "15" {
			t.Fatalf("first export after the reload: %v, want admitted with 15 of 20 units left", r)
		}
		// Workers hand their counters to Envoy on tick: wait for one.
		var got int64
		for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			st, err := fetchStats(lt.admin)
			if err != nil {
				t.Fatal(err)
			}
			if got = st["wasmcustom.borrowcycle.export.requests_allowed"]; got != 0 || time.Now().After(deadline) {
				break
			}
		}
		if got != 1 {
			t.Errorf("export.requests_allowed = %d, want 1", got)
		}
		// The default limit still decides everything else.
		if r := lt.get(c, "acme"); r.header.Get("x-ratelimit-limit") == "" {
			t.Errorf("default limit after adding export: %v", r)
		}
	})
}

func ptr[T any](v T) *T { return &v }
