package ampsim

import (
	"crypto/tls"
	"io"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/testenv"
)

// TestTLSAndToken: a TLS simulator requiring a token serves a caller that
// trusts its CA and sends the token, and refuses one without the token or
// with another with UNAUTHENTICATED, on GetFlightInfo and DoGet alike.
func TestTLSAndToken(t *testing.T) {
	pki := testenv.NewPKI(t)
	cfg := smallConfig(3)
	cfg.TLSCertFile, cfg.TLSKeyFile = pki.ServerCertFile, pki.ServerKeyFile
	cfg.Token = "sim-token"
	s := startServer(t, cfg)
	c, err := flight.NewClientWithMiddleware(s.Addr(), nil, nil,
		grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pki.Pool})))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	const sql = "SELECT block_num FROM eth_rpc.blocks"
	desc := cmdDescriptor(t, sql)

	authed := metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer sim-token")
	info, err := c.GetFlightInfo(authed, desc)
	require.NoError(t, err)
	st, err := c.DoGet(authed, info.Endpoint[0].Ticket)
	require.NoError(t, err)
	rdr, err := flight.NewRecordReader(st)
	require.NoError(t, err)
	rows := 0
	for rdr.Next() {
		rows += int(rdr.RecordBatch().NumRows())
	}
	rdr.Release()
	assert.Equal(t, 3, rows)

	for _, tc := range []struct{ name, header, msg string }{
		{"no header", "", msgNoToken},
		{"not bearer", "Basic c2ltLXRva2Vu", msgNoToken},
		{"wrong token", "Bearer other", msgWrongToken},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			if tc.header != "" {
				ctx = metadata.AppendToOutgoingContext(ctx, "authorization", tc.header)
			}
			n := len(s.Requests())
			_, err := c.GetFlightInfo(ctx, desc)
			assert.Equal(t, codes.Unauthenticated, status.Code(err), "%v", err)
			assert.Equal(t, tc.msg, status.Convert(err).Message())
			// A ticket from an authenticated plan is refused too.
			st, err := c.DoGet(ctx, info.Endpoint[0].Ticket)
			require.NoError(t, err)
			_, err = st.Recv()
			assert.NotErrorIs(t, err, io.EOF)
			assert.Equal(t, codes.Unauthenticated, status.Code(err), "%v", err)
			assert.Len(t, s.Requests(), n, "a refused call is not served")
		})
	}
}

func TestTLSFilesMustBePaired(t *testing.T) {
	_, err := New(Config{TLSCertFile: "x.pem"})
	assert.ErrorContains(t, err, "TLSCertFile and TLSKeyFile")
}
