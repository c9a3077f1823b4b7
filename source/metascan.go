package source

import (
	"github.com/amp-kafka-bridge/amp-kafka-bridge/reorg"
)

// scanAppMetadata is the fast path of ParseAppMetadata: a hand-written
// scanner for the form Amp sends (amp-protocol.md §2.1), with no
// allocation but the Ranges slice. It accepts a subset of what the strict
// parser accepts and returns the same value for it; anything else (escapes
// or non-ASCII bytes in a string, unknown or repeated keys, numbers with a
// sign, fraction or exponent, a value of the wrong type, trailing bytes)
// makes it return ok false, and ParseAppMetadata then runs the strict
// parser, which either accepts the input or names what is wrong with it.
// FuzzAppMetadataFastPath checks that the two agree.
func scanAppMetadata(b []byte) (m AppMetadata, ok bool) {
	s := scanner{b: b}
	if !s.lit('{') {
		return m, false
	}
	var seenRanges, seenComplete bool
	for first := true; ; first = false {
		if !first && s.lit('}') {
			break
		}
		if !first && !s.lit(',') {
			return m, false
		}
		key, kok := s.str()
		if !kok || !s.lit(':') {
			return m, false
		}
		switch key {
		case "ranges":
			if seenRanges {
				return m, false
			}
			seenRanges = true
			if m.Ranges, ok = s.ranges(); !ok {
				return m, false
			}
		case "ranges_complete":
			if seenComplete {
				return m, false
			}
			seenComplete = true
			if m.Complete, ok = s.boolean(); !ok {
				return m, false
			}
		default:
			return m, false
		}
	}
	s.ws()
	if s.i != len(s.b) || !seenRanges || !seenComplete {
		return AppMetadata{}, false
	}
	return m, true
}

// scanner reads JSON tokens from b at i.
type scanner struct {
	b []byte
	i int
}

// ws skips JSON whitespace.
func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// lit consumes c after whitespace, if it is next.
func (s *scanner) lit(c byte) bool {
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// word consumes the literal w (true, false, null) after whitespace.
func (s *scanner) word(w string) bool {
	s.ws()
	if len(s.b)-s.i >= len(w) && string(s.b[s.i:s.i+len(w)]) == w {
		s.i += len(w)
		return true
	}
	return false
}

// strBytes reads a string of printable ASCII without escapes and returns
// its contents (aliasing b).
func (s *scanner) strBytes() ([]byte, bool) {
	if !s.lit('"') {
		return nil, false
	}
	start := s.i
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			return s.b[start : s.i-1], true
		case c == '\\' || c < 0x20 || c >= 0x80:
			return nil, false
		}
		s.i++
	}
	return nil, false
}

// str is strBytes as a string; the conversion in a switch or comparison
// does not allocate.
func (s *scanner) str() (string, bool) {
	b, ok := s.strBytes()
	return string(b), ok
}

func (s *scanner) boolean() (bool, bool) {
	switch {
	case s.word("true"):
		return true, true
	case s.word("false"):
		return false, true
	}
	return false, false
}

// uint reads an unsigned integer without sign, fraction or exponent that
// fits in a uint64 (what encoding/json accepts for a uint64 field, minus the
// forms it also accepts but Amp never sends).
func (s *scanner) uint() (uint64, bool) {
	s.ws()
	start := s.i
	var v uint64
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		d := uint64(s.b[s.i] - '0')
		if v > (1<<64-1-d)/10 {
			return 0, false
		}
		v = v*10 + d
		s.i++
	}
	n := s.i - start
	if n == 0 || (n > 1 && s.b[start] == '0') {
		return 0, false
	}
	if s.i < len(s.b) {
		switch s.b[s.i] {
		case '.', 'e', 'E':
			return 0, false
		}
	}
	return v, true
}

// hash reads "0x" (or "0X") followed by 64 hex digits of either case.
func (s *scanner) hash() (reorg.Hash, bool) {
	var h reorg.Hash
	b, ok := s.strBytes()
	if !ok || len(b) != 66 || b[0] != '0' || (b[1] != 'x' && b[1] != 'X') {
		return h, false
	}
	for i := range h {
		hi, ok1 := unhex(b[2+2*i])
		lo, ok2 := unhex(b[3+2*i])
		if !ok1 || !ok2 {
			return h, false
		}
		h[i] = hi<<4 | lo
	}
	return h, true
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// ranges reads the array of block ranges; an empty array is nil, as in the
// strict parser.
func (s *scanner) ranges() ([]reorg.BlockRange, bool) {
	if !s.lit('[') {
		return nil, false
	}
	if s.lit(']') {
		return nil, true
	}
	var out []reorg.BlockRange
	for {
		r, ok := s.blockRange()
		if !ok {
			return nil, false
		}
		out = append(out, r)
		if s.lit(']') {
			return out, true
		}
		if !s.lit(',') {
			return nil, false
		}
	}
}

// blockRange reads one range object with numbers, network and hash,
// optional prev_hash (null or a hash) and timestamp (null or a number).
func (s *scanner) blockRange() (reorg.BlockRange, bool) {
	var r reorg.BlockRange
	if !s.lit('{') {
		return r, false
	}
	var seen [5]bool // numbers, network, hash, prev_hash, timestamp
	for first := true; ; first = false {
		if !first && s.lit('}') {
			break
		}
		if !first && !s.lit(',') {
			return r, false
		}
		key, ok := s.str()
		if !ok || !s.lit(':') {
			return r, false
		}
		var k int
		switch key {
		case "numbers":
			k = 0
			ok = s.numbers(&r)
		case "network":
			k = 1
			var nb []byte
			nb, ok = s.strBytes()
			ok = ok && len(nb) > 0
			r.Network = string(nb)
		case "hash":
			k = 2
			r.Hash, ok = s.hash()
		case "prev_hash":
			k = 3
			if s.word("null") {
				r.PrevHash, r.HasPrevHash = reorg.Hash{}, false
			} else {
				r.PrevHash, ok = s.hash()
				r.HasPrevHash = ok
			}
		case "timestamp":
			k = 4
			if s.word("null") {
				r.Timestamp = 0
			} else {
				r.Timestamp, ok = s.uint()
			}
		default:
			return r, false
		}
		if !ok || seen[k] {
			return r, false
		}
		seen[k] = true
	}
	if !seen[0] || !seen[1] || !seen[2] || r.Start > r.End {
		return r, false
	}
	return r, true
}

// numbers reads {"start":N,"end":M} in either order.
func (s *scanner) numbers(r *reorg.BlockRange) bool {
	if !s.lit('{') {
		return false
	}
	var seenStart, seenEnd bool
	for first := true; ; first = false {
		if !first && s.lit('}') {
			break
		}
		if !first && !s.lit(',') {
			return false
		}
		key, ok := s.str()
		if !ok || !s.lit(':') {
			return false
		}
		switch {
		case key == "start" && !seenStart:
			r.Start, ok = s.uint()
			seenStart = true
		case key == "end" && !seenEnd:
			r.End, ok = s.uint()
			seenEnd = true
		default:
			return false
		}
		if !ok {
			return false
		}
	}
	return seenStart && seenEnd
}
