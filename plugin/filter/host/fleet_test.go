//go:build !wasm

package host

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/proxytest"
)

const fleetTestConfig = `{"capacity": 100, "cycle": "10s", "name": "fleethost",
	"fleet": {"cluster": "gubernator", "capacity": 200, "fallback_capacity": 5, "sync_interval": "500ms", "timeout": "100ms"}}`

// lastCallout is the newest callout the plugin sent.
func (h *host) lastCallout(seen int) proxytest.HttpCalloutAttribute {
	h.t.Helper()
	all := h.GetCalloutAttributesFromContext(proxytest.PluginContextID)
	if len(all) != seen+1 {
		h.t.Fatalf("%d callouts, want %d", len(all), seen+1)
	}
	return all[seen]
}

// answerAll answers a callout the way Gubernator grants every request.
func (h *host) answerAll(c proxytest.HttpCalloutAttribute) {
	h.t.Helper()
	var req struct {
		Requests []json.RawMessage `json:"requests"`
	}
	if err := json.Unmarshal(c.Body, &req); err != nil {
		h.t.Fatalf("callout body %q: %v", c.Body, err)
	}
	answers := make([]string, len(req.Requests))
	for i := range answers {
		answers[i] = `{"status":"UNDER_LIMIT","limit":"200","remaining":"100","error":""}`
	}
	h.CallOnHttpCallResponse(c.CalloutID, [][2]string{{":status", "200"}}, nil,
		[]byte(`{"responses":[`+strings.Join(answers, ",")+`]}`))
}

func TestFleetCalloutsAndFallbackEpisode(t *testing.T) {
	eachRunner(t, func(t *testing.T, runner string) {
		h := startHost(t, runner, fleetTestConfig)
		if got := h.GetTickPeriod(); got != 500 {
			t.Errorf("tick period %d ms, want the sync interval", got)
		}
		h.Tick()
		c := h.lastCallout(0)
		if c.Upstream != "gubernator" || !strings.Contains(string(c.Body), `"unique_key":"borrowcycle/fleethost/`) {
			t.Fatalf("callout to %q with %s", c.Upstream, c.Body)
		}
		// Garbage: a fallback episode, logged once.
		h.CallOnHttpCallResponse(c.CalloutID, [][2]string{{":status", "200"}}, nil, []byte("<html>oops"))
		if got := h.admittedOf("a", 10); got != 5 {
			t.Errorf("admitted %d during the fallback, want fallback_capacity 5", got)
		}
		h.advance(500 * time.Millisecond)
		h.Tick()
		// A gateway error is retried once, at once; a second one fails.
		h.CallOnHttpCallResponse(h.lastCallout(1).CalloutID, [][2]string{{":status", "503"}}, nil, nil)
		h.CallOnHttpCallResponse(h.lastCallout(2).CalloutID, [][2]string{{":status", "503"}}, nil, nil)
		if warns := h.logsContaining("fleet: Gubernator"); len(warns) != 1 {
			t.Errorf("fallback logs %q, want one line for the episode", warns)
		}
		// An answer closes the episode.
		h.advance(500 * time.Millisecond)
		h.Tick()
		h.answerAll(h.lastCallout(3))
		if infos := h.logsContaining("answers again"); len(infos) != 1 {
			t.Errorf("rejoin logs %q, want one", infos)
		}
		h.flushMetrics()
		h.checkCounters("borrowcycle.fleethost.fleet.", map[string]uint64{
			"callouts": 4, "failures": 2, "fallbacks": 1,
		})
		if n := h.counter("borrowcycle.fleethost.panics"); n != 0 {
			t.Errorf("%d panics", n)
		}
	})
}

// A callout that got no answer goes out once more at once, so that a peer
// that is down costs no fallback when another one answers.
func TestFleetRetriesAnUnansweredCallout(t *testing.T) {
	eachRunner(t, func(t *testing.T, runner string) {
		h := startHost(t, runner, strings.Replace(fleetTestConfig, "fleethost", "fleetretry", 1))
		h.Tick()
		first := h.lastCallout(0)
		h.CallOnHttpCallResponse(first.CalloutID, [][2]string{{":status", "503"}}, nil, []byte("upstream connect error"))
		retry := h.lastCallout(1)
		if string(retry.Body) != string(first.Body) {
			t.Errorf("retry %s, want the same leases as %s", retry.Body, first.Body)
		}
		h.answerAll(retry)
		if warns := h.logsContaining("fleet: Gubernator"); len(warns) != 0 {
			t.Errorf("fallback logs %q after a retry that was answered", warns)
		}
		if got := h.admittedOf("a", 3); got != 1 {
			t.Errorf("admitted %d on the lease the retry got, want 1", got)
		}
		h.flushMetrics()
		h.checkCounters("borrowcycle.fleetretry.fleet.", map[string]uint64{
			"callouts": 2, "failures": 0, "fallbacks": 0, "leased": 1,
		})
	})
}

func TestFleetLeaseAdmitsWithoutWaiting(t *testing.T) {
	eachRunner(t, func(t *testing.T, runner string) {
		h := startHost(t, runner, strings.Replace(fleetTestConfig, "fleethost", "fleetlease", 1))
		// Before any answer the process holds nothing, and no request waits.
		if got := h.admittedOf("a", 3); got != 0 {
			t.Errorf("admitted %d before any lease", got)
		}
		h.Tick()
		h.answerAll(h.lastCallout(0))
		// The first lease is the standing one: capacity/64 = 1 unit.
		if got := h.admittedOf("a", 3); got != 1 {
			t.Errorf("admitted %d on the standing lease, want 1", got)
		}
		h.flushMetrics()
		if got := h.counter("borrowcycle.fleetlease.fleet.leased"); got != 1 {
			t.Errorf("leased %d units", got)
		}
	})
}
