package encode

import (
	"fmt"
)

// readLong reads a zig-zag varint at pos.
func readLong(b []byte, pos int) (int64, int, error) {
	var u uint64
	for shift := uint(0); shift < 70; shift += 7 {
		if pos >= len(b) {
			return 0, pos, fmt.Errorf("%w: varint runs past the end at byte %d", ErrMalformed, pos)
		}
		c := b[pos]
		pos++
		u |= uint64(c&0x7f) << shift
		if c < 0x80 {
			return int64(u>>1) ^ -int64(u&1), pos, nil
		}
	}
	return 0, pos, fmt.Errorf("%w: varint longer than 10 bytes at byte %d", ErrMalformed, pos)
}

func advance(b []byte, pos, n int) (int, error) {
	if n < 0 || pos+n > len(b) {
		return pos, fmt.Errorf("%w: %d bytes needed at byte %d of %d", ErrMalformed, n, pos, len(b))
	}
	return pos + n, nil
}

// skipValue returns the position just after the value of type t that starts
// at pos, following the Avro binary encoding without decoding it.
func skipValue(t *avroType, b []byte, pos int) (int, error) {
	switch t.kind {
	case kNull:
		return pos, nil
	case kBoolean:
		return advance(b, pos, 1)
	case kInt, kLong, kEnum:
		_, p, err := readLong(b, pos)
		return p, err
	case kFloat:
		return advance(b, pos, 4)
	case kDouble:
		return advance(b, pos, 8)
	case kFixed:
		return advance(b, pos, t.size)
	case kBytes, kString:
		n, p, err := readLong(b, pos)
		if err != nil {
			return p, err
		}
		return advance(b, p, int(n))
	case kUnion:
		idx, p, err := readLong(b, pos)
		if err != nil {
			return p, err
		}
		if idx < 0 || int(idx) >= len(t.branches) {
			return p, fmt.Errorf("%w: union branch %d of %d at byte %d", ErrMalformed, idx, len(t.branches), pos)
		}
		return skipValue(t.branches[idx], b, p)
	case kRecord:
		var err error
		for _, f := range t.fields {
			if pos, err = skipValue(f.typ, b, pos); err != nil {
				return pos, err
			}
		}
		return pos, nil
	case kArray, kMap:
		for {
			n, p, err := readLong(b, pos)
			if err != nil {
				return p, err
			}
			pos = p
			if n == 0 {
				return pos, nil
			}
			if n < 0 {
				size, p, err := readLong(b, pos)
				if err != nil {
					return p, err
				}
				if pos, err = advance(b, p, int(size)); err != nil {
					return pos, err
				}
				continue
			}
			for range n {
				if t.kind == kMap {
					if pos, err = skipValue(prim(kString), b, pos); err != nil {
						return pos, err
					}
					if pos, err = skipValue(t.values, b, pos); err != nil {
						return pos, err
					}
				} else if pos, err = skipValue(t.items, b, pos); err != nil {
					return pos, err
				}
			}
		}
	}
	return pos, fmt.Errorf("%w: cannot skip type %s", ErrMalformed, t.kind)
}
