package reorg

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func mustHash(t *testing.T, s string) Hash {
	t.Helper()
	h, err := ParseHash(s)
	require.NoError(t, err)
	return h
}

// TestE5BatchIDVectors checks the test vectors of amp-protocol.md §6 and
// that the id is deterministic and sensitive to the hash (scenario E5).
func TestE5BatchIDVectors(t *testing.T) {
	assert.Equal(t, "507ba6138502b1dd", RangeID("ethereum", 100, 110, "0xabc123", ""))
	r := BlockRange{
		Network: "mainnet", Start: 24000000, End: 24000099,
		Hash:     mustHash(t, "0x"+strings.Repeat("11", 32)),
		PrevHash: mustHash(t, "0x"+strings.Repeat("22", 32)), HasPrevHash: true,
	}
	assert.Equal(t, "b6094735f0ec9331", BatchID([]BlockRange{r}))
	assert.Equal(t, "72e19f8a5bf1ab25", RangeID(`"acme/eth_mainnet".transactions`, 24000000, 24000025, "", ""))

	first := BatchID([]BlockRange{r})
	assert.Equal(t, first, BatchID([]BlockRange{r}), "same range, same id")
	other := r
	other.Hash[0] ^= 1
	assert.NotEqual(t, BatchID([]BlockRange{r}), BatchID([]BlockRange{other}), "other fork, other id")
	poly := r
	poly.Network = "polygon"
	assert.Equal(t, BatchID([]BlockRange{r})+"|"+BatchID([]BlockRange{poly}), BatchID([]BlockRange{r, poly}))
}

func TestBlockRangeJSONRoundTrip(t *testing.T) {
	in := `{"numbers":{"start":100,"end":102},"network":"mainnet","hash":"0x` + strings.Repeat("ab", 32) +
		`","prev_hash":"0x` + strings.Repeat("cd", 32) + `","timestamp":1765585559}`
	var r BlockRange
	require.NoError(t, json.Unmarshal([]byte(in), &r))
	assert.Equal(t, uint64(100), r.Start)
	assert.Equal(t, uint64(102), r.End)
	assert.True(t, r.HasPrevHash)
	assert.Equal(t, uint64(1765585559), r.Timestamp)
	out, err := json.Marshal(r)
	require.NoError(t, err)
	assert.JSONEq(t, in, string(out))
}

func TestBlockRangeJSONErrors(t *testing.T) {
	h := `"0x` + strings.Repeat("ab", 32) + `"`
	tests := []struct {
		name, in, errContains string
	}{
		{"no numbers", `{"network":"m","hash":` + h + `}`, "numbers.start"},
		{"no end", `{"numbers":{"start":1},"network":"m","hash":` + h + `}`, "numbers.end"},
		{"no network", `{"numbers":{"start":1,"end":2},"hash":` + h + `}`, "network"},
		{"no hash", `{"numbers":{"start":1,"end":2},"network":"m"}`, "missing hash"},
		{"short hash", `{"numbers":{"start":1,"end":2},"network":"m","hash":"0xab"}`, "64 hex"},
		{"start after end", `{"numbers":{"start":3,"end":2},"network":"m","hash":` + h + `}`, "after end"},
		{"negative", `{"numbers":{"start":-1,"end":2},"network":"m","hash":` + h + `}`, "parsing block range"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r BlockRange
			err := json.Unmarshal([]byte(tt.in), &r)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.errContains)
		})
	}
	var r BlockRange
	require.NoError(t, json.Unmarshal([]byte(`{"numbers":{"start":0,"end":0},"network":"m","hash":`+h+`,"prev_hash":null}`), &r))
	assert.False(t, r.HasPrevHash)
}

func TestCursorHeader(t *testing.T) {
	h := mustHash(t, "0x0deee2eaa7adb2b28c7fa731f79ea86e77e375f8ee0a0f2619ba6ec3eb2f68e6")
	c := CursorFromRanges([]BlockRange{{Network: "mainnet", Start: 24000000, End: 24000099, Hash: h}})
	s, err := c.Header()
	require.NoError(t, err)
	assert.Equal(t, `{"mainnet":{"number":24000099,"hash":"0x0deee2eaa7adb2b28c7fa731f79ea86e77e375f8ee0a0f2619ba6ec3eb2f68e6"}}`, s)
	back, err := ParseCursor(s)
	require.NoError(t, err)
	assert.Equal(t, c, back)

	_, err = Cursor{}.Header()
	require.ErrorContains(t, err, "no network")
	_, err = ParseCursor(`{"mainnet":{"number":1}}`)
	require.ErrorContains(t, err, "number and hash")
	_, err = ParseCursor(`not-json`)
	require.Error(t, err)
}
