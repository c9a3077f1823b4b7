package health

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestWaitPermanent: a transient error is retried until the service
// answers; an error Wait.Permanent reports ends the wait at once, on the
// first attempt or a later one.
func TestWaitPermanent(t *testing.T) {
	errWrongPassword := errors.New("WRONGPASS")
	permanent := func(err error) bool { return errors.Is(err, errWrongPassword) }
	tests := []struct {
		name     string
		errs     []error // the answers of the attempts; nil after them
		want     error
		attempts int
	}{
		{name: "transient then up", errs: []error{errors.New("connection refused"), errors.New("connection refused")}, attempts: 3},
		{name: "permanent at once", errs: []error{errWrongPassword}, want: errWrongPassword, attempts: 1},
		{name: "permanent later", errs: []error{errors.New("connection refused"), errWrongPassword}, want: errWrongPassword, attempts: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				tr := New(Config{}, nil, nil, nil)
				attempts := 0
				err := tr.Wait(t.Context(), Wait{Service: "redis at r:6379", Min: time.Second, Max: time.Second, Timeout: time.Minute,
					TimeoutKey: "startup_timeout", Permanent: permanent}, func(context.Context) error {
					attempts++
					if attempts <= len(tt.errs) {
						return tt.errs[attempts-1]
					}
					return nil
				})
				if tt.want == nil {
					require.NoError(t, err)
				} else {
					require.ErrorIs(t, err, tt.want)
				}
				assert.Equal(t, tt.attempts, attempts)
			})
		})
	}
}
