package reorg

// Validate checks incoming ranges against the previous batch's ranges with
// the rules of amp-protocol.md §5.1 steps 1–3, in order: prev_hash at and
// after genesis, the network set, and per network consecutiveness (skipped
// when a range equals its previous range). previous is empty on a fresh
// start. It returns a [*ValidationError] or nil.
func Validate(previous, incoming []BlockRange) error {
	for _, r := range incoming {
		if r.Network == "" || r.Start > r.End {
			return &ValidationError{Kind: InvalidRange, Network: r.Network, Incoming: r}
		}
		zeroPrev := !r.HasPrevHash || r.PrevHash.IsZero()
		if r.Start == 0 && !zeroPrev {
			return &ValidationError{Kind: InvalidPrevHash, Network: r.Network, Incoming: r}
		}
		if r.Start > 0 && zeroPrev {
			return &ValidationError{Kind: MissingPrevHash, Network: r.Network, Incoming: r}
		}
	}
	for i, r := range incoming {
		for _, o := range incoming[:i] {
			if o.Network == r.Network {
				return &ValidationError{Kind: DuplicateNetwork, Network: r.Network, Incoming: r}
			}
		}
	}
	if len(previous) == 0 {
		return nil
	}
	if len(previous) != len(incoming) {
		return &ValidationError{Kind: NetworkCountChanged,
			PreviousNetworks: networks(previous), IncomingNetworks: networks(incoming)}
	}
	for _, r := range incoming {
		p, ok := rangeOf(previous, r.Network)
		if !ok {
			return &ValidationError{Kind: UnexpectedNetwork, Network: r.Network, Incoming: r,
				PreviousNetworks: networks(previous), IncomingNetworks: networks(incoming)}
		}
		if r.Same(p) {
			continue
		}
		switch {
		case r.Start > p.End+1:
			return &ValidationError{Kind: Gap, Network: r.Network, Previous: p, Incoming: r}
		case r.Start == p.End+1:
			if parentHash(r) != p.Hash {
				return &ValidationError{Kind: HashMismatch, Network: r.Network, Previous: p, Incoming: r}
			}
		default:
			if parentHash(r) == p.Hash {
				return &ValidationError{Kind: InvalidReorg, Network: r.Network, Previous: p, Incoming: r}
			}
		}
	}
	return nil
}

// Detect returns the invalidations of a reorg by the rule of
// amp-protocol.md §5.1 step 4 (and amp docs/reorgs.md): for every incoming
// range whose network had a previous range, if the two differ and the
// incoming one starts at or before the previous end, the blocks from the
// incoming start to the larger of the two ends are invalid. It returns nil
// when there is no reorg. Call it only on ranges that passed [Validate].
func Detect(previous, incoming []BlockRange) []Invalidation {
	var invs []Invalidation
	for _, r := range incoming {
		p, ok := rangeOf(previous, r.Network)
		if !ok || r.Same(p) || r.Start > p.End {
			continue
		}
		invs = append(invs, Invalidation{Network: r.Network, Start: r.Start, End: max(r.End, p.End)})
	}
	return invs
}

// parentHash is the prev_hash with an absent one read as the zero hash.
func parentHash(r BlockRange) Hash {
	if !r.HasPrevHash {
		return Hash{}
	}
	return r.PrevHash
}

func rangeOf(rs []BlockRange, network string) (BlockRange, bool) {
	for _, r := range rs {
		if r.Network == network {
			return r, true
		}
	}
	return BlockRange{}, false
}

func networks(rs []BlockRange) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.Network
	}
	return out
}

// sameRanges reports whether a and b are the same ranges in the same order.
func sameRanges(a, b []BlockRange) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !a[i].Same(b[i]) {
			return false
		}
	}
	return true
}
