package host

import (
	"time"

	"github.com/borrowcycle/borrowcycle/plugin/filter"
	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm"
	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/types"
)

// Held requests (max_wait, filter/wait.go): streams this worker pauses
// until their unit comes, decided again on tick. What a worker holds is
// bounded per limit (max_waiting), each hold by max_wait, and a stream
// that ends while held is let go at once.

// held is one paused request.
type held struct {
	h     *httpContext // nil once let go
	o     filter.Outcome
	since time.Time     // when it arrived
	due   time.Time     // when it is decided again
	aged  time.Duration // the tick periods since it arrived: its age on a clock that cannot step
}

// holds are a worker's held requests, in arrival order.
type holds struct {
	list     []*held
	perLimit []int
	refused  map[heldKey]time.Time // in one pass: clients held again, and until when
}

type heldKey struct {
	limit  int
	client string
}

// hold pauses h's request, refused as o, for wait. False when the limit's
// bound is reached: the request gets its reply now.
func (p *pluginContext) hold(h *httpContext, o filter.Outcome, wait time.Duration) bool {
	if p.holds.perLimit[o.Limit] >= p.filter.MaxWaiting(o.Limit) {
		return false
	}
	now := p.filter.Now()
	o.Promised = wait
	w := &held{h: h, o: o, since: now, due: now.Add(wait)}
	p.holds.list = append(p.holds.list, w)
	p.holds.perLimit[o.Limit]++
	h.held = w
	return true
}

// letGo forgets w: its request was decided, or its stream ended.
func (p *pluginContext) letGo(w *held) {
	if w.h == nil {
		return
	}
	p.holds.perLimit[w.o.Limit]--
	w.h.held, w.h = nil, nil
}

// serveHeld decides again every held request whose time has come (every
// one, with all: the plugin is going away), then gives the tick its own
// context back.
//
// The filter's clock is the wall clock, which may step. A request is due
// when the clock passes its time, or reads before its arrival (it stepped
// back); and a hold whose ticks add up to max_wait is decided for good,
// each tick counting the period that brought it (aged: the host ticks
// faster while the worker reads a plan in slices),
// whatever the clock says. Requests of one client are served in arrival
// order, and once one is held again, the rest of that client's due ones
// are held to the same time without a decision: they would be refused
// alike, and each decision counts as demand.
func (p *pluginContext) serveHeld(all bool, aged time.Duration) {
	if len(p.holds.list) == 0 {
		return
	}
	now := p.filter.Now()
	clear(p.holds.refused)
	kept := p.holds.list[:0]
	for _, w := range p.holds.list {
		if w.h == nil {
			continue
		}
		w.aged += aged
		final := all || w.aged >= p.filter.MaxWait(w.o.Limit)+p.tick
		if !final && now.Before(w.due) && !now.Before(w.since) {
			kept = append(kept, w)
			continue
		}
		key := heldKey{w.o.Limit, w.o.Client}
		if due, ok := p.holds.refused[key]; ok && !final {
			w.due, w.o.Promised = due, due.Sub(w.since)
			kept = append(kept, w)
			continue
		}
		if !p.serve(w, now, final) {
			p.holds.refused[key] = w.due
			kept = append(kept, w)
		}
	}
	clear(p.holds.list[len(kept):])
	p.holds.list = kept
	_ = proxywasm.SetEffectiveContext(p.id)
}

// serve decides w's request again: admitted, it resumes; refused with its
// unit still within max_wait, it stays held (false), unless final; else it
// gets the reply it would have had on arrival. A panic lets it go with
// the failure mode, like a panic on arrival.
func (p *pluginContext) serve(w *held, now time.Time, final bool) (done bool) {
	h := w.h
	defer guard(p, "held request", func() {
		done = true
		p.letGo(w)
		switch {
		case h.replied: // its reply went out
		case h.decided && h.outcome.Decision.Allowed:
			_ = proxywasm.ResumeHttpRequest()
		case h.failSafe() == types.ActionContinue:
			_ = proxywasm.ResumeHttpRequest()
		}
	})
	if err := proxywasm.SetEffectiveContext(h.id); err != nil {
		p.letGo(w) // the host no longer knows the stream
		return true
	}
	// Its age, for max_wait, is at least what its ticks add up to: the
	// clock may have stepped back since it arrived. What it waited, as
	// reported, is the clock's, unless the clock went back.
	waited := now.Sub(w.since)
	if waited < 0 {
		waited = w.aged
	}
	o := p.filter.Redecide(w.o, waited)
	if more, ok := p.filter.Hold(o, max(waited, w.aged)); ok && !final {
		// Another request took the unit: held again, in arrival order,
		// with the new promise.
		w.o.Decision, w.o.Window, w.o.Shares, w.due = o.Decision, o.Window, o.Shares, now.Add(more)
		w.o.Promised = w.due.Sub(w.since)
		return false
	}
	p.letGo(w)
	m := p.limits[o.Limit][o.Window]
	m.count(o.Decision)
	if o.Decision.Allowed {
		m.delayed(waited)
	}
	_ = setAccessLog(p.filter.AccessLog(o))
	if h.carryOut(o) == types.ActionContinue {
		_ = proxywasm.ResumeHttpRequest()
	}
	return true
}

// OnPluginDone implements types.PluginContext: the plugin is going away
// (its configuration was replaced or removed), and its ticks with it, so
// every request it holds is decided now, for good.
func (p *pluginContext) OnPluginDone() bool {
	defer guard(p, "OnPluginDone", nil)
	if p.filter != nil {
		p.serveHeld(true, 0)
	}
	return true
}

// OnHttpStreamDone implements types.HttpContext: a stream that ends while
// held (the client gave up, a timeout) is let go, and counted as such: it
// was never decided for good.
func (h *httpContext) OnHttpStreamDone() {
	if w := h.held; w != nil {
		h.plugin.limits[w.o.Limit][w.o.Window].abandoned.pending++
		h.plugin.letGo(w)
	}
}
