package filter

import (
	"strconv"

	"github.com/borrowcycle/borrowcycle/engine"
)

// AccessLogProperty is the property the host sets on every decided
// request. Envoy keeps a property a Wasm filter sets as filter state named
// "wasm.<property>", which an access-log format prints with
// %FILTER_STATE(wasm.borrowcycle:PLAIN)%.
const AccessLogProperty = "borrowcycle"

// accessLog builds the access-log record of decided requests, one line of
// space-separated key=value pairs (docs/contract.md):
//
//	limit=export action=rejected reason=over_limit share=10 remaining=0 client=9f2c61b1e0d1a4f3
//
// client is the engine's 64-bit hash of the id in hex ("-" for anonymous),
// so that an operator can follow one client through the log without the
// log holding ids; with log_client_id the raw id follows as id=<id>,
// percent-encoded outside printable ASCII. The buffer is reused: a VM runs
// one callback at a time and the host copies the record.
type accessLog struct {
	heads   []string   // "limit=<name> action=" per limit; "" when access_log is off
	windows [][]string // " window=<label>" per limit and window, for limits of several windows
	logIDs  []bool
	buf     []byte
}

func newAccessLog(limits []Config) accessLog {
	a := accessLog{heads: make([]string, len(limits)), windows: make([][]string, len(limits)), logIDs: make([]bool, len(limits)), buf: make([]byte, 0, 160)}
	for i := range limits {
		if limits[i].AccessLog {
			a.heads[i] = "limit=" + limits[i].Name + " action="
		}
		for _, w := range limits[i].Windows {
			a.windows[i] = append(a.windows[i], " window="+w.Label)
		}
		a.logIDs[i] = limits[i].LogClientID
	}
	return a
}

// record is the record of o; nil when no limit decided, or when the limit
// that decided has access_log off.
func (a *accessLog) record(o Outcome) []byte {
	if !o.Matched() || o.Limit >= len(a.heads) || a.heads[o.Limit] == "" {
		return nil
	}
	d := &o.Decision
	b := append(a.buf[:0], a.heads[o.Limit]...)
	switch {
	case !d.Allowed:
		b = append(b, "rejected"...)
	case d.WouldReject:
		b = append(b, "would_reject"...)
	default:
		b = append(b, "allowed"...)
	}
	b = append(append(b, " reason="...), d.Reason.String()...)
	if ws := a.windows[o.Limit]; o.Window < len(ws) {
		b = append(b, ws[o.Window]...) // the window whose share follows
	}
	b = strconv.AppendInt(append(b, " share="...), d.Limit, 10)
	b = strconv.AppendInt(append(b, " remaining="...), d.Remaining, 10)
	if o.Waited > 0 {
		b = append(strconv.AppendInt(append(b, " waited="...), o.Waited.Milliseconds(), 10), "ms"...)
	}
	b = append(b, " client="...)
	if o.Client == "" {
		b = append(b, '-')
	} else {
		b = appendHex64(b, engine.HashID(o.Client))
		if a.logIDs[o.Limit] {
			b = appendEscaped(append(b, " id="...), o.Client)
		}
	}
	a.buf = b
	return b
}

const hexDigits = "0123456789abcdef"

// appendHex64 appends v as 16 lower-case hex digits.
func appendHex64(b []byte, v uint64) []byte {
	for shift := 60; shift >= 0; shift -= 4 {
		b = append(b, hexDigits[v>>uint(shift)&0xf])
	}
	return b
}

// appendEscaped appends s with every byte outside printable ASCII, the
// space, '%' and '"' percent-encoded: the record stays one line of
// space-separated fields whatever a client sends.
func appendEscaped(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || c == '%' || c == '"' {
			b = append(b, '%', hexDigits[c>>4], hexDigits[c&0xf])
			continue
		}
		b = append(b, c)
	}
	return b
}
