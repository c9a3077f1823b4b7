package health

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func get(t *testing.T, h http.HandlerFunc, target string) (int, Report) {
	t.Helper()
	w := httptest.NewRecorder()
	h(w, httptest.NewRequestWithContext(t.Context(), http.MethodGet, target, nil))
	var rep Report
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &rep), w.Body.String())
	return w.Code, rep
}

// TestReadiness walks a stream through its states on virtual time: starting
// is not ready, Ready is, a call in flight past ReadyAfter is not (and names
// the call), past LiveAfter fails /livez, NotReady carries its reason,
// Failed is final and sets stream_up to 0.
func TestReadiness(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewRegistry()
		tr := New(Config{ReadyAfter: 10 * time.Second, LiveAfter: time.Minute}, reg, nil, nil)
		a, b := tr.Stream("a"), tr.Stream("b")
		code, rep := get(t, tr.ServeReady, "/readyz")
		assert.Equal(t, http.StatusServiceUnavailable, code)
		assert.Equal(t, StateStarting, rep.Streams["a"].State)

		a.Ready()
		b.Ready()
		code, _ = get(t, tr.ServeReady, "/readyz")
		assert.Equal(t, http.StatusOK, code)
		assert.InDelta(t, 1, testutil.ToFloat64(tr.rdy.WithLabelValues("a")), 0)

		done := a.Track("kafka: committing transaction x")
		time.Sleep(9 * time.Second)
		code, _ = get(t, tr.ServeReady, "/readyz")
		assert.Equal(t, http.StatusOK, code, "within ready_timeout")
		time.Sleep(2 * time.Second)
		code, rep = get(t, tr.ServeReady, "/readyz")
		assert.Equal(t, http.StatusServiceUnavailable, code)
		assert.Contains(t, rep.Streams["a"].Reason, "kafka: committing transaction x for 11s")
		assert.True(t, rep.Streams["b"].Ready, "the other stream is ready")
		code, _ = get(t, tr.ServeReady, "/readyz?stream=b")
		assert.Equal(t, http.StatusOK, code, "per stream")
		code, _ = get(t, tr.ServeLive, "/livez")
		assert.Equal(t, http.StatusOK, code, "alive below live_timeout")
		time.Sleep(time.Minute)
		code, rep = get(t, tr.ServeLive, "/livez")
		assert.Equal(t, http.StatusServiceUnavailable, code, "wedged")
		assert.True(t, rep.Streams["a"].Wedged)
		done()
		code, _ = get(t, tr.ServeLive, "/livez")
		assert.Equal(t, http.StatusOK, code)
		code, _ = get(t, tr.ServeReady, "/readyz")
		assert.Equal(t, http.StatusOK, code)

		a.NotReady("amp: reconnecting")
		_, rep = get(t, tr.ServeReady, "/readyz")
		assert.Equal(t, StateNotReady, rep.Streams["a"].State)
		assert.Equal(t, "amp: reconnecting", rep.Streams["a"].Reason)

		a.Failed(errors.New("key column x is not a column of the query"))
		a.Ready() // a late report cannot undo a failure
		_, rep = get(t, tr.ServeReady, "/readyz")
		assert.Equal(t, StateFailed, rep.Streams["a"].State)
		assert.Contains(t, rep.Streams["a"].Reason, "key column x")
		assert.InDelta(t, 0, testutil.ToFloat64(tr.up.WithLabelValues("a")), 0)
		assert.InDelta(t, 1, testutil.ToFloat64(tr.up.WithLabelValues("b")), 0)
		w := httptest.NewRecorder()
		tr.ServeReady(w, httptest.NewRequestWithContext(t.Context(), http.MethodGet, "/readyz?stream=nope", nil))
		assert.Equal(t, http.StatusNotFound, w.Code)
	})
}

// TestReadinessNamesTheInnermostCall: a Kafka call stuck inside an outer
// "publishing a batch" is what the reason names, with the outer call kept
// for context; an inner call not yet past ReadyAfter is not named.
func TestReadinessNamesTheInnermostCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := New(Config{ReadyAfter: 10 * time.Second, LiveAfter: time.Minute}, prometheus.NewRegistry(), nil, nil)
		a := tr.Stream("a")
		a.Ready()
		outer := a.Track("publishing a batch")
		time.Sleep(5 * time.Second)
		inner := a.Track("kafka: flushing")
		time.Sleep(6 * time.Second)
		_, rep := get(t, tr.ServeReady, "/readyz")
		assert.Equal(t, "waiting on publishing a batch for 11s", rep.Streams["a"].Reason, "the inner call is within ready_timeout")
		time.Sleep(5 * time.Second)
		_, rep = get(t, tr.ServeReady, "/readyz")
		assert.Equal(t, "kafka: flushing for 11s (inside publishing a batch for 16s)", rep.Streams["a"].Stuck)
		inner()
		outer()
		_, rep = get(t, tr.ServeReady, "/readyz")
		assert.True(t, rep.Streams["a"].Ready)
	})
}

// TestCalls: Calls names every call in flight, oldest first, however young.
func TestCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := New(Config{ReadyAfter: 10 * time.Second}, prometheus.NewRegistry(), nil, nil)
		a := tr.Stream("a")
		assert.Nil(t, a.Calls())
		outer := a.Track("publishing a batch")
		time.Sleep(1500 * time.Millisecond)
		inner := a.Track("kafka: flushing")
		time.Sleep(200 * time.Millisecond)
		assert.Equal(t, []string{"publishing a batch for 1.7s", "kafka: flushing for 200ms"}, a.Calls())
		inner()
		assert.Equal(t, []string{"publishing a batch for 1.7s"}, a.Calls())
		outer()
		assert.Nil(t, a.Calls())
	})
}

// TestProbes: a failing probe makes every stream not ready, naming the
// service, until it passes again.
func TestProbes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := New(Config{ProbeInterval: time.Second}, nil, nil, nil)
		tr.Stream("a").Ready()
		var down atomic.Bool
		ctx, cancel := context.WithCancel(t.Context())
		go tr.Probe(ctx, []Probe{{Name: "registry at http://r", Check: func(context.Context) error {
			if down.Load() {
				return errors.New("connection refused")
			}
			return nil
		}}})
		synctest.Wait()
		assert.True(t, tr.Report().Ready)
		down.Store(true)
		time.Sleep(time.Second)
		synctest.Wait()
		rep := tr.Report()
		assert.False(t, rep.Ready)
		assert.Equal(t, "connection refused", rep.Probes["registry at http://r"])
		assert.Contains(t, rep.Streams["a"].Reason, "registry at http://r: connection refused")
		down.Store(false)
		time.Sleep(time.Second)
		synctest.Wait()
		assert.True(t, tr.Report().Ready)
		cancel()
	})
}

// TestStandby: in cluster mode a stream another member owns is standby:
// ready on /readyz (a member that owns nothing is a healthy standby), but
// neither up nor ready in the per-member gauges; a failed stream that moves
// away becomes standby, and one taken over again starts afresh.
func TestStandby(t *testing.T) {
	reg := prometheus.NewRegistry()
	tr := New(Config{}, reg, nil, nil)
	a, b := tr.Stream("a"), tr.Stream("b")
	a.Standby("owned by another member")
	b.Standby("owned by another member")
	code, rep := get(t, tr.ServeReady, "/readyz")
	assert.Equal(t, http.StatusOK, code, "a member that owns nothing is ready")
	assert.Equal(t, StateStandby, rep.Streams["a"].State)
	assert.Equal(t, "owned by another member", rep.Streams["a"].Reason)
	assert.Zero(t, testutil.ToFloat64(tr.up.WithLabelValues("a")))
	assert.Zero(t, testutil.ToFloat64(tr.rdy.WithLabelValues("a")))

	b.Starting("this member took it over")
	code, _ = get(t, tr.ServeReady, "/readyz")
	assert.Equal(t, http.StatusServiceUnavailable, code, "a stream taken over is not ready until it publishes")
	b.Failed(errors.New("bad data"))
	b.Standby("owned by another member")
	code, rep = get(t, tr.ServeReady, "/readyz")
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, StateStandby, rep.Streams["b"].State, "a failed stream that moved away is standby here")
	b.Starting("this member took it over")
	b.Ready()
	_, rep = get(t, tr.ServeReady, "/readyz")
	assert.Equal(t, StateReady, rep.Streams["b"].State)
	assert.InDelta(t, 1.0, testutil.ToFloat64(tr.up.WithLabelValues("b")), 0)
}
