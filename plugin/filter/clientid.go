package filter

// ClientID turns the client header's value into the id the engine limits,
// or reports the request anonymous: header missing, nothing but spaces and
// tabs, or longer than maxBytes after trimming.
//
// Envoy rejects CR, LF and NUL in header values before the filter runs, but
// the id is only hashed and never echoed, so whatever bytes arrive are safe:
// they name a client like any other. The length bound keeps one request
// from making the plugin hash (and the guest allocate) an arbitrary amount.
func ClientID(value string, found bool, maxBytes int) (string, bool) {
	if !found {
		return "", false
	}
	id := trimSpaceTab(value)
	if id == "" || len(id) > maxBytes {
		return "", false
	}
	return id, true
}

// trimSpaceTab trims only what HTTP calls optional whitespace (SP, HTAB).
// strings.TrimSpace would also strip CR, LF, VT, FF and Unicode spaces, and
// the contract promises the narrower rule.
func trimSpaceTab(s string) string {
	start, end := 0, len(s)
	for start < end && (s[start] == ' ' || s[start] == '\t') {
		start++
	}
	for end > start && (s[end-1] == ' ' || s[end-1] == '\t') {
		end--
	}
	return s[start:end]
}
