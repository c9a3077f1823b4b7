package offsets

import (
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/reorg"
)

// appendCheckpoint appends the encoding of cp in formatOf(cp): byte for
// byte what encoding/json writes for encoded{formatOf(cp), cp} (a test holds it
// to that), without reflection, because a checkpoint with a long batch log is
// encoded on every commit.
func appendCheckpoint(b []byte, cp Checkpoint) []byte {
	b = append(b, `{"format":`...)
	b = strconv.AppendInt(b, int64(formatOf(cp)), 10)
	b = append(b, `,"stream":`...)
	b = appendString(b, cp.Stream)
	b = append(b, `,"version":`...)
	b = strconv.AppendUint(b, cp.Version, 10)
	b = append(b, `,"fingerprint":`...)
	b = appendString(b, cp.Fingerprint)
	b = append(b, `,"committed_at":"`...)
	b = cp.CommittedAt.AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","control_offset":`...)
	b = strconv.AppendInt(b, cp.ControlOffset, 10)
	b = append(b, `,"snapshot":{"next":`...)
	b = strconv.AppendUint(b, cp.Snapshot.Next, 10)
	b = append(b, `,"watermarks":`...)
	if cp.Snapshot.Watermarks == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i, w := range cp.Snapshot.Watermarks {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"seq":`...)
			b = strconv.AppendUint(b, w.Seq, 10)
			b = append(b, `,"ranges":`...)
			b = appendRanges(b, w.Ranges)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	if cp.Snapshot.Incomplete {
		b = append(b, `,"incomplete":true`...)
	}
	if len(cp.Snapshot.Handover) > 0 {
		// Only a backfill's hand-over checkpoint has one: no need for speed.
		h, err := json.Marshal(cp.Snapshot.Handover)
		if err != nil {
			panic("offsets: encoding a hand-over cursor: " + err.Error()) // a map of numbers and hashes cannot fail
		}
		b = append(b, `,"handover":`...)
		b = append(b, h...)
	}
	if cp.Snapshot.Start {
		b = append(b, `,"start":true`...)
	}
	b = append(b, `},"batches":`...)
	if cp.Batches == nil {
		b = append(b, "null"...)
		return appendTopicIDs(b, cp.TopicIDs)
	}
	b = append(b, '[')
	for i, bt := range cp.Batches {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"seq":`...)
		b = strconv.AppendUint(b, bt.Seq, 10)
		b = append(b, `,"id":`...)
		b = appendString(b, bt.ID)
		b = append(b, `,"ranges":`...)
		b = appendRanges(b, bt.Ranges)
		b = append(b, `,"spans":`...)
		if bt.Spans == nil {
			b = append(b, "null"...)
		} else {
			b = append(b, '[')
			for j, s := range bt.Spans {
				if j > 0 {
					b = append(b, ',')
				}
				b = append(b, `{"topic":`...)
				b = appendString(b, s.Topic)
				b = append(b, `,"partition":`...)
				b = strconv.AppendInt(b, int64(s.Partition), 10)
				b = append(b, `,"first":`...)
				b = strconv.AppendInt(b, s.First, 10)
				b = append(b, `,"last":`...)
				b = strconv.AppendInt(b, s.Last, 10)
				b = append(b, '}')
			}
			b = append(b, ']')
		}
		if bt.SchemaID != 0 {
			b = append(b, `,"schema_id":`...)
			b = strconv.AppendInt(b, int64(bt.SchemaID), 10)
		}
		b = append(b, '}')
	}
	b = append(b, ']')
	return appendTopicIDs(b, cp.TopicIDs)
}

// appendTopicIDs appends the optional "topic_ids" field (keys sorted, as
// encoding/json writes a map) and closes the checkpoint's object.
func appendTopicIDs(b []byte, ids map[string]string) []byte {
	if len(ids) == 0 {
		return append(b, '}')
	}
	b = append(b, `,"topic_ids":{`...)
	for i, k := range slices.Sorted(maps.Keys(ids)) {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, k)
		b = append(b, ':')
		b = appendString(b, ids[k])
	}
	return append(b, "}}"...)
}

// appendRanges appends ranges as reorg.BlockRange.MarshalJSON writes them.
func appendRanges(b []byte, rs []reorg.BlockRange) []byte {
	if rs == nil {
		return append(b, "null"...)
	}
	b = append(b, '[')
	for i, r := range rs {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"numbers":{"start":`...)
		b = strconv.AppendUint(b, r.Start, 10)
		b = append(b, `,"end":`...)
		b = strconv.AppendUint(b, r.End, 10)
		b = append(b, `},"network":`...)
		b = appendString(b, r.Network)
		b = append(b, `,"hash":"`...)
		b = appendHash(b, r.Hash)
		b = append(b, `","prev_hash":`...)
		if r.HasPrevHash {
			b = append(b, '"')
			b = appendHash(b, r.PrevHash)
			b = append(b, '"')
		} else {
			b = append(b, "null"...)
		}
		if r.Timestamp != 0 {
			b = append(b, `,"timestamp":`...)
			b = strconv.AppendUint(b, r.Timestamp, 10)
		}
		b = append(b, '}')
	}
	return append(b, ']')
}

func appendHash(b []byte, h reorg.Hash) []byte {
	const digits = "0123456789abcdef"
	b = append(b, '0', 'x')
	for _, c := range h {
		b = append(b, digits[c>>4], digits[c&0x0f])
	}
	return b
}

// appendString appends s as a JSON string exactly as encoding/json does:
// plain printable ASCII is copied, anything else goes through json.Marshal
// (HTML-safe escapes, U+2028/2029, invalid UTF-8 as U+FFFD).
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always encodes
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
