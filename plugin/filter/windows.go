package filter

import (
	"encoding/json"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/borrowcycle/borrowcycle/engine"
)

// This file is the "windows" form of a limit (docs/contract.md, "Several
// windows"): "10 a second and 10,000 a day". Each window is a limit of
// its own in the engine (its own shares, budget and shared-data keys),
// with the limit's other settings; a request passes only if every window
// admits it, and a window that admitted a request another refused gives
// its units back.

// MaxWindows bounds the windows of one limit.
const MaxWindows = 4

// windowSpan is one window as configured.
type windowSpan struct {
	capacity int64
	cycle    time.Duration
	index    int // its place in the windows array, for errors
}

// windows parses the windows field: 2 to MaxWindows objects with exactly
// a capacity and a cycle, in the bounds of the single-window form, of
// distinct cycles. It returns them longest first, the order in which a
// request is decided (see decide).
func (p *fieldParser) windows(field string, raw json.RawMessage) []windowSpan {
	if p.own != nil && !given(p.own, field) {
		// Inherited from the top level: its errors name the top level's
		// field, as any inherited field's do.
		top := fieldParser{}
		spans := top.windows(field, raw)
		if p.err == nil {
			p.err = top.err
		}
		return spans
	}
	if !p.present(field, raw, "an array", false) {
		return nil
	}
	var elems []json.RawMessage
	if err := json.Unmarshal(raw, &elems); err != nil {
		p.fail(field, err.Error())
		return nil
	}
	if len(elems) < 2 || len(elems) > MaxWindows {
		p.fail(field, "must hold 2 to "+strconv.Itoa(MaxWindows)+" windows, got "+strconv.Itoa(len(elems))+" (one window is capacity and cycle)")
		return nil
	}
	spans := make([]windowSpan, 0, len(elems))
	for i, elem := range elems {
		at := field + "[" + strconv.Itoa(i) + "]"
		if jsonKind(elem) != "an object" {
			p.fail(at, "must be an object, got "+jsonKind(elem))
			return nil
		}
		members, names, err := objectMembers(elem)
		if err != nil {
			p.fail(at, err.Error())
			return nil
		}
		for _, name := range names {
			if name != "capacity" && name != "cycle" {
				p.fail(at+"."+name, "unknown field: a window has only capacity and cycle")
				return nil
			}
		}
		w := windowSpan{
			index:    i,
			capacity: p.integer(at+".capacity", members["capacity"], 0, 1, engine.MaxCapacity, true),
			cycle:    p.duration(at+".cycle", members["cycle"], 0, engine.MinCycleLength, engine.MaxCycle, true),
		}
		if p.err != nil {
			return nil
		}
		for j := range spans {
			if spans[j].cycle == w.cycle {
				p.fail(at+".cycle", "duplicate of "+field+"["+strconv.Itoa(j)+"].cycle "+w.cycle.String())
				return nil
			}
		}
		spans = append(spans, w)
	}
	sort.Slice(spans, func(a, b int) bool { return spans[a].cycle > spans[b].cycle })
	return spans
}

// expandWindows sets cfg.Windows from spans (longest first): each window
// is cfg.Engine with its own capacity and cycle, min_cycle's default for
// its cycle unless min_cycle was given, and its own key prefix. cfg.Engine
// is the shortest window's already. (Caps, which would mean something else
// per window, are refused by parseLimit.)
func expandWindows(cfg *Config, spans []windowSpan, minCycleGiven bool, label func(string) string) error {
	if cfg.Engine.Fleet != nil {
		return fieldError(label("windows"), "not supported with fleet")
	}
	cfg.Windows = make([]Window, len(spans))
	for i, s := range spans {
		at := label("windows") + "[" + strconv.Itoa(s.index) + "]"
		if cfg.Cost > s.capacity {
			return fieldError(at+".capacity", "must be at least cost ("+strconv.FormatInt(cfg.Cost, 10)+"), got "+strconv.FormatInt(s.capacity, 10))
		}
		ec := cfg.Engine
		ec.Capacity, ec.Cycle = s.capacity, s.cycle
		if !minCycleGiven {
			ec.MinCycle = engine.DefaultMinCycle(s.cycle)
		}
		w := Window{Label: WindowLabel(s.cycle), Engine: ec}
		w.Engine.KeyPrefix += "/" + w.Label
		if err := w.Engine.Validate(); err != nil {
			return fromEngineError(err, func(f string) string { return at + "." + f })
		}
		if err := checkPacedCost(&w.Engine, cfg.Cost, label("cost")); err != nil {
			return err
		}
		cfg.Windows[i] = w
	}
	return nil
}

// Window is one window of a limit: its engine configuration, and its
// label in metric and policy names.
type Window struct {
	Label  string // WindowLabel of its cycle; "" for a limit of one window
	Engine engine.Config
}

// EngineWindows are the limit's windows, longest first: Windows, or the
// one window of Engine.
func (c *Config) EngineWindows() []Window {
	if len(c.Windows) > 0 {
		return c.Windows
	}
	return []Window{{Engine: c.Engine}}
}

// MetricsName is the name the metrics of a limit's window go by, after
// "borrowcycle.": the limit's name, and for one of several windows
// "window_<label>" after it (a segment the stats_tags of envoy/envoy.yaml
// turn into a window tag).
func MetricsName(limit string, w Window) string {
	if w.Label == "" {
		return limit
	}
	return limit + ".window_" + w.Label
}

// WindowLabel names a window by its cycle in metric and policy names: the
// duration without its zero units, in [a-z0-9_] ("24h", "1m30s", "1_5s").
func WindowLabel(cycle time.Duration) string {
	s := strings.Replace(cycle.String(), "h0m", "h", 1) // (Duration.String writes every unit from the largest down)
	if strings.HasSuffix(s, "h0s") || strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	s = strings.NewReplacer(".", "_", "µ", "u").Replace(s)
	return s
}
