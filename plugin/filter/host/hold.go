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
	since time.Time // when it arrived
	due   time.Time // when it is decided again
}

// holds are a worker's held requests, in arrival order.
type holds struct {
	list     []*held
	perLimit []int
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
func (p *pluginContext) serveHeld(all bool) {
	if len(p.holds.list) == 0 {
		return
	}
	now := p.filter.Now()
	kept := p.holds.list[:0]
	for _, w := range p.holds.list {
		if w.h != nil && ((!all && now.Before(w.due)) || !p.serve(w, now, all)) {
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
		if h.failSafe() == types.ActionContinue {
			_ = proxywasm.ResumeHttpRequest()
		}
	})
	if err := proxywasm.SetEffectiveContext(h.id); err != nil {
		p.letGo(w) // the host no longer knows the stream
		return true
	}
	waited := now.Sub(w.since)
	o := p.filter.Redecide(w.o, waited)
	if more, ok := p.filter.Hold(o, waited); ok && !final {
		// Another request took the unit: held again, in arrival order,
		// with the new promise.
		w.o.Decision, w.due = o.Decision, now.Add(more)
		w.o.Promised = w.due.Sub(w.since)
		return false
	}
	p.letGo(w)
	m := p.limits[o.Limit]
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
		p.serveHeld(true)
	}
	return true
}

// OnHttpStreamDone implements types.HttpContext: a stream that ends while
// held (the client gave up, a timeout) is let go.
func (h *httpContext) OnHttpStreamDone() {
	if h.held != nil {
		h.plugin.letGo(h.held)
	}
}
