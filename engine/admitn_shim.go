// TEMPORARY SHIM: deleted when the window engine lands.

package engine

import "time"

// AdmitNAt decides on one request of cost units from client at now.
//
// Temporary approximation over the per-request engine: it admits one unit
// at a time and stops at the first rejection, so a rejected request of cost
// c may still have taken up to c-1 units. The window engine replaces it with
// an atomic charge of all c units or none.
func (l *Limiter) AdmitNAt(now time.Time, client string, cost int64) Decision {
	d := l.AdmitAt(now, client)
	for i := int64(1); i < cost && d.Allowed && !d.WouldReject; i++ {
		d = l.AdmitAt(now, client)
	}
	return d
}
