package host

import (
	"testing"
	"time"

	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/types"
)

// open sends a request as client id and leaves its stream open: a held
// request stays paused until a tick decides it again.
func (h *host) open(id string) uint32 {
	h.t.Helper()
	ctx := h.InitializeHttpContext()
	h.CallOnRequestHeaders(ctx, [][2]string{{":method", "GET"}, {":path", "/"}, {":authority", "test"}, {"x-client-id", id}}, true)
	return ctx
}

// paused reports whether the stream is held: paused, with no local reply.
func (h *host) paused(ctx uint32) bool {
	return h.GetCurrentHttpStreamAction(ctx) == types.ActionPause && h.GetSentLocalResponse(ctx) == nil
}

// A paced limit of 10 per 10 s with burst 0: one client's units come at
// 1 ms, then 1 s, 2 s... With max_wait, a request that would be refused
// is held, and admitted on the first tick after its unit comes, with no
// 429; it is counted once, as admitted and delayed.
func TestHeldRequestIsAdmittedWhenItsUnitComes(t *testing.T) {
	eachRunner(t, func(t *testing.T, runner string) {
		h := startHost(t, runner, `{"capacity": 10, "cycle": "10s", "burst": 0, "max_wait": "3s", "debug_headers": true, "name": "hold"}`)
		h.advance(time.Millisecond)
		if !h.from("a").admitted() {
			t.Fatal("the first request was not admitted")
		}
		ctx := h.open("a")
		if !h.paused(ctx) {
			t.Fatalf("the second request: action %v, reply %+v; want it held", h.GetCurrentHttpStreamAction(ctx), h.GetSentLocalResponse(ctx))
		}
		h.advance(900 * time.Millisecond)
		h.Tick()
		if !h.paused(ctx) {
			t.Fatal("released at 0.9 s, before its unit (1 s)")
		}
		h.advance(200 * time.Millisecond)
		h.Tick()
		if a := h.GetCurrentHttpStreamAction(ctx); a != types.ActionContinue || h.GetSentLocalResponse(ctx) != nil {
			t.Fatalf("at 1.1 s: action %v, reply %+v; want it resumed", a, h.GetSentLocalResponse(ctx))
		}
		h.CallOnResponseHeaders(ctx, [][2]string{{":status", "200"}}, false)
		waited := ""
		for _, kv := range h.GetCurrentResponseHeaders(ctx) {
			if kv[0] == "x-borrowcycle-waited" {
				waited = kv[1]
			}
		}
		if waited != "1100;promised=999" {
			t.Errorf("x-borrowcycle-waited %q, want 1100;promised=999 (ms)", waited)
		}
		h.CompleteHttpContext(ctx)
		h.advance(time.Second) // counters go to the host with housekeeping, once a second here
		h.flushMetrics()
		h.checkCounters("borrowcycle.hold.", map[string]uint64{
			"requests_allowed": 2, "requests_delayed": 1, "requests_rejected.over_limit": 0,
		})
	})
}

// A request whose unit comes after max_wait gets its 429 at once; so does
// one over max_waiting; a held request whose stream ends frees its place.
func TestHoldBounds(t *testing.T) {
	eachRunner(t, func(t *testing.T, runner string) {
		h := startHost(t, runner, `{"capacity": 10, "cycle": "10s", "burst": 0, "max_wait": "500ms", "max_waiting": 1, "name": "bounds"}`)
		h.advance(time.Millisecond)
		h.from("a")
		if r := h.from("a"); r.local == nil || r.local.StatusCode != 429 {
			t.Fatalf("its next unit at 1 s, past max_wait: %+v, want a 429 now", r)
		}
		h.advance(600 * time.Millisecond)
		first := h.open("a")
		if !h.paused(first) {
			t.Fatal("its unit 400 ms away: not held")
		}
		if r := h.from("a"); r.local == nil || r.local.StatusCode != 429 {
			t.Fatalf("max_waiting 1 held already: %+v, want a 429 now", r)
		}
		h.CompleteHttpContext(first) // the client gave up
		second := h.open("a")
		if !h.paused(second) {
			t.Fatal("the place of a stream that ended was not freed")
		}
		h.advance(500 * time.Millisecond)
		h.Tick()
		if h.GetCurrentHttpStreamAction(second) != types.ActionContinue {
			t.Fatal("the held request was not admitted at its unit")
		}
		h.CompleteHttpContext(second)
	})
}

// The wall clock steps back ten minutes while a request is held: the hold
// still ends within max_wait and a tick of ticks (here 3 s and 50 ms), and
// housekeeping goes on, so counters still reach the host.
func TestHoldSurvivesAClockStepBack(t *testing.T) {
	eachRunner(t, func(t *testing.T, runner string) {
		h := startHost(t, runner, `{"capacity": 10, "cycle": "10s", "burst": 0, "max_wait": "3s", "name": "step"}`)
		h.advance(time.Millisecond)
		h.from("a")
		ctx := h.open("a")
		if !h.paused(ctx) {
			t.Fatal("the second request was not held")
		}
		h.Tick()
		h.advance(-10 * time.Minute)
		ticks := 0
		for ; ticks < 200 && h.paused(ctx); ticks++ {
			h.advance(50 * time.Millisecond)
			h.Tick()
		}
		if h.paused(ctx) || ticks > 61 {
			t.Fatalf("held for %d ticks of 50 ms after the clock stepped back, want at most 61 (max_wait and a tick)", ticks)
		}
		h.from("a")
		for i := 0; i < 30; i++ { // 1.5 s of ticks: housekeeping is due at least once
			h.advance(50 * time.Millisecond)
			h.Tick()
		}
		if got := h.counter("borrowcycle.step.requests_allowed") + h.counter("borrowcycle.step.requests_rejected.over_limit"); got < 3 {
			t.Errorf("%d decisions reached the host's counters, want the 3 made: housekeeping stopped", got)
		}
	})
}
