package reorg

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
)

// Point is the last fully processed block of one network.
type Point struct {
	// Number is the block number.
	Number uint64 `json:"number"`
	// Hash is the hash of that block.
	Hash Hash `json:"hash"`
}

// Cursor is the resume position sent to Amp in the amp-resume header: per
// network, the last fully processed block (amp-protocol.md §3.1). A nil or
// empty Cursor means "start from the earliest block" and is never sent.
type Cursor map[string]Point

// CursorFromRanges builds the cursor of a completed microbatch: for every
// range, its End and Hash. Only ranges of a ranges_complete batch may be used.
func CursorFromRanges(ranges []BlockRange) Cursor {
	if len(ranges) == 0 {
		return nil
	}
	c := make(Cursor, len(ranges))
	for _, r := range ranges {
		c[r.Network] = Point{Number: r.End, Hash: r.Hash}
	}
	return c
}

// Networks returns the cursor's network ids in sorted order.
func (c Cursor) Networks() []string { return slices.Sorted(maps.Keys(c)) }

// clone returns a copy of c (nil for nil).
func (c Cursor) clone() Cursor {
	if c == nil {
		return nil
	}
	return maps.Clone(c)
}

// Validate checks that the cursor can be sent: at least one network, no
// empty network id. The server silently ignores a cursor it cannot parse
// and restarts from the first block, so the client must check its own.
func (c Cursor) Validate() error {
	if len(c) == 0 {
		return fmt.Errorf("reorg: cursor has no network; an empty cursor fails a streaming query at Amp")
	}
	for n := range c {
		if n == "" {
			return fmt.Errorf("reorg: cursor has an empty network id")
		}
	}
	return nil
}

// Header returns the amp-resume header value, e.g.
// {"mainnet":{"number":24000099,"hash":"0x0dee…"}}, after Validate.
func (c Cursor) Header() (string, error) {
	if err := c.Validate(); err != nil {
		return "", err
	}
	b, err := json.Marshal(map[string]Point(c))
	if err != nil {
		return "", fmt.Errorf("reorg: encoding cursor: %w", err)
	}
	return string(b), nil
}

// ParseCursor parses an amp-resume header value strictly and validates it.
func ParseCursor(s string) (Cursor, error) {
	var raw map[string]struct {
		Number *uint64 `json:"number"`
		Hash   *Hash   `json:"hash"`
	}
	if err := json.Unmarshal([]byte(s), &raw); err != nil {
		return nil, fmt.Errorf("reorg: parsing cursor %q: %w", s, err)
	}
	c := make(Cursor, len(raw))
	for n, p := range raw {
		if p.Number == nil || p.Hash == nil {
			return nil, fmt.Errorf("reorg: parsing cursor: network %q needs both number and hash", n)
		}
		c[n] = Point{Number: *p.Number, Hash: *p.Hash}
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}
