package testenv

import (
	"fmt"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRequired(t *testing.T) {
	tests := []struct {
		name    string
		require string
		service string
		want    bool
	}{
		{name: "unset", require: "", service: ServiceKafka, want: false},
		{name: "all", require: "all", service: ServiceRedis, want: true},
		{name: "listed", require: "kafka, redis", service: ServiceRedis, want: true},
		{name: "case and spaces", require: " Registry ", service: ServiceRegistry, want: true},
		{name: "not listed", require: "kafka,redis", service: ServicePython, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(EnvRequire, tt.require)
			assert.Equal(t, tt.want, Required(tt.service))
		})
	}
}

// recTB records Fatal and Skip instead of ending the real test.
type recTB struct {
	testing.TB
	fatal, skip string
}

func (r *recTB) Helper() {}
func (r *recTB) Fatalf(format string, args ...any) {
	r.fatal = fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (r *recTB) Fatal(args ...any) { r.fatal = fmt.Sprint(args...); runtime.Goexit() }
func (r *recTB) Skipf(format string, args ...any) {
	r.skip = fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (r *recTB) Skip(args ...any) { r.skip = fmt.Sprint(args...); runtime.Goexit() }

func runRec(t *testing.T, fn func(testing.TB)) *recTB {
	r := &recTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(r)
	}()
	<-done
	return r
}

func TestRequireReal(t *testing.T) {
	tests := []struct {
		name      string
		value     string
		require   string
		wantFatal string
		wantSkip  string
	}{
		{name: "set", value: "127.0.0.1:9092"},
		{name: "unset skips", wantSkip: EnvKafkaSeeds},
		{name: "unset but required fails", require: "all", wantFatal: EnvKafkaSeeds},
		{name: "other service required skips", require: "redis", wantSkip: EnvKafkaSeeds},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(EnvKafkaSeeds, tt.value)
			t.Setenv(EnvRequire, tt.require)
			var got string
			r := runRec(t, func(tb testing.TB) { got = RequireReal(tb, ServiceKafka, EnvKafkaSeeds) })
			if tt.wantFatal != "" {
				assert.Contains(t, r.fatal, tt.wantFatal)
			} else {
				assert.Empty(t, r.fatal)
			}
			if tt.wantSkip != "" {
				assert.Contains(t, r.skip, tt.wantSkip)
			} else {
				assert.Empty(t, r.skip)
			}
			if tt.value != "" {
				assert.Equal(t, tt.value, got)
			}
		})
	}
}

func TestBackendsFakeAlwaysFirst(t *testing.T) {
	t.Setenv(EnvRequire, "")
	t.Setenv(EnvKafkaSeeds, "")
	t.Setenv(EnvRedisAddr, "127.0.0.1:1")
	t.Setenv(EnvRegistryURL, "")
	k := KafkaBackends(t)
	require.Len(t, k, 1)
	assert.Equal(t, "kfake", k[0].Name)
	assert.False(t, k[0].Real)
	assert.NotEmpty(t, Seeds(k[0].Addr))

	r := RedisBackends(t)
	require.Len(t, r, 2)
	assert.Equal(t, Backend{Name: "real-redis", Addr: "127.0.0.1:1", Real: true}, r[1])

	reg := RegistryBackends(t)
	require.Len(t, reg, 1)
	assert.True(t, strings.HasPrefix(reg[0].Addr, "http://127.0.0.1:"), reg[0].Addr)
}

func TestBackendsRequiredButUnsetFails(t *testing.T) {
	t.Setenv(EnvRequire, "kafka")
	t.Setenv(EnvKafkaSeeds, "")
	r := runRec(t, func(tb testing.TB) { KafkaBackends(tb) })
	assert.Contains(t, r.fatal, EnvKafkaSeeds)
}

func TestSeeds(t *testing.T) {
	assert.Equal(t, []string{"a:1", "b:2"}, Seeds(" a:1, ,b:2,"))
	assert.Empty(t, Seeds(""))
}

func TestUniqueName(t *testing.T) {
	valid := regexp.MustCompile(`^[a-zA-Z0-9._-]+$`)
	a, b := UniqueName(t, "topic"), UniqueName(t, "topic")
	assert.NotEqual(t, a, b)
	assert.Regexp(t, valid, a)
	assert.True(t, strings.HasPrefix(a, "topic-TestUniqueName-"), a)
	t.Run("sub/with spaces", func(t *testing.T) {
		n := UniqueName(t, "")
		assert.Regexp(t, valid, n)
		assert.LessOrEqual(t, len(n), 249, "Kafka topic names are at most 249 characters")
	})
}

func TestClusterID(t *testing.T) {
	for range 200 {
		id := clusterID()
		assert.Len(t, id, 22)
		assert.False(t, strings.HasPrefix(id, "-"))
	}
}
