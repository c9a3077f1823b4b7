package main

import (
	"bytes"
	"context"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/flight"
	pb "github.com/apache/arrow-go/v18/arrow/flight/gen/flight"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestRunServesUntilCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var out, errOut syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-addr", "127.0.0.1:0", "-blocks", "3", "-tx-per-block", "2", "-block-interval", "0",
			"-keep-alive", "off"}, &out, &errOut)
	}()
	re := regexp.MustCompile(`listening on (\S+)`)
	var addr string
	require.Eventually(t, func() bool {
		m := re.FindStringSubmatch(out.String())
		if m != nil {
			addr = m[1]
		}
		return m != nil
	}, 10*time.Second, 10*time.Millisecond, "stderr: %s", errOut.String())

	c, err := flight.NewClientWithMiddleware(addr, nil, nil, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer c.Close()
	a, err := anypb.New(&pb.CommandStatementQuery{Query: "SELECT block_num FROM eth_rpc.blocks"})
	require.NoError(t, err)
	cmd, err := proto.Marshal(a)
	require.NoError(t, err)
	info, err := c.GetFlightInfo(ctx, &flight.FlightDescriptor{Type: flight.DescriptorCMD, Cmd: cmd})
	require.NoError(t, err)
	st, err := c.DoGet(ctx, info.Endpoint[0].Ticket)
	require.NoError(t, err)
	rdr, err := flight.NewRecordReader(st)
	require.NoError(t, err)
	rows := 0
	for rdr.Next() {
		rows += int(rdr.RecordBatch().NumRows())
	}
	rdr.Release()
	assert.Equal(t, 3, rows)

	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return after cancel")
	}
}

func TestRunRejectsBadFlags(t *testing.T) {
	tests := []struct {
		name        string
		args        []string
		errContains string
	}{
		{"unknown policy", []string{"-keep-alive", "sometimes"}, "keep-alive policy"},
		{"unknown flag", []string{"-nope"}, "flag provided but not defined"},
		{"bad unsynced table", []string{"-addr", "127.0.0.1:0", "-unsynced-tables", "receipts"}, "names no table"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut syncBuffer
			err := run(t.Context(), tt.args, &out, &errOut)
			require.ErrorContains(t, err, tt.errContains)
		})
	}
}
