package config

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// LoadConfig reads the YAML file (path "" means no file), applies the
// environment overrides, reads secrets from the environment or files, fills
// defaults and validates. Every problem is reported at once: unknown keys
// with their path, line and the closest valid key, values of the wrong type,
// unknown BRIDGE_… variables, and everything Validate finds.
//
// env looks a variable up (SetFlags.Lookup adds the -set flags to it). The
// unknown-variable check needs the names that are set, which a lookup
// cannot list: it takes them from os.Environ, keeping those env also
// reports as set.
func LoadConfig(path string, env func(string) (string, bool)) (*Config, error) {
	var names []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if _, ok := env(name); ok && strings.HasPrefix(name, "BRIDGE_") {
			names = append(names, name)
		}
	}
	return load(path, env, names)
}

// load is LoadConfig with the names of the BRIDGE_… variables given.
func load(path string, env func(string) (string, bool), names []string) (*Config, error) {
	var c Config
	c.defaultsTop()
	var errs []error
	if path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("reading config: %w", err)
		}
		errs = append(errs, decodeYAML(path, b, &c)...)
	}
	growStreams(&c, env)
	errs = append(errs, checkEnvNames(names, len(c.Streams))...)
	errs = append(errs, applyEnv(reflect.ValueOf(&c).Elem(), "BRIDGE", env)...)
	if err := c.loadSecrets(env); err != nil {
		errs = append(errs, err)
	}
	c.defaultsStreams()
	errs = append(errs, flatten(c.Validate())...)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return &c, nil
}

// decodeYAML decodes b into c, first checking every key of the file
// against the schema: an unknown key is reported with its path
// (streams[0].topc), its line and the closest valid key. Type errors are
// rewritten to name the key of their line.
func decodeYAML(file string, b []byte, c *Config) []error {
	var root yaml.Node
	if err := yaml.Unmarshal(b, &root); err != nil {
		return []error{fmt.Errorf("parsing config %s: %w", file, err)}
	}
	if len(root.Content) == 0 {
		return nil
	}
	w := nodeWalker{file: file, lines: map[int]string{}}
	w.walk(root.Content[0], reflect.TypeFor[Config](), "")
	errs := w.errs
	if err := root.Decode(c); err != nil {
		var te *yaml.TypeError
		if !errors.As(err, &te) {
			return append(errs, fmt.Errorf("parsing config %s: %w", file, err))
		}
		for _, m := range te.Errors {
			errs = append(errs, w.typeError(m))
		}
	}
	return errs
}

// nodeWalker checks a YAML node tree against the struct's yaml tags.
type nodeWalker struct {
	file string
	errs []error
	// lines maps a line to the key whose value is on it (the enclosing
	// section when a flow mapping puts several keys on one line).
	lines map[int]string
}

func (w *nodeWalker) walk(n *yaml.Node, t reflect.Type, path string) {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	w.line(n.Line, path)
	switch {
	case t.Kind() == reflect.Struct && n.Kind == yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Value == "<<" {
				w.walk(v, t, path)
				continue
			}
			kp := k.Value
			if path != "" {
				kp = path + "." + k.Value
			}
			f, ok := fieldByYAML(t, k.Value)
			if !ok {
				w.errs = append(w.errs, w.unknown(k, t, path, kp))
				continue
			}
			w.walk(v, f.Type, kp)
		}
	case t.Kind() == reflect.Slice && n.Kind == yaml.SequenceNode:
		for j, e := range n.Content {
			w.walk(e, t.Elem(), fmt.Sprintf("%s[%d]", path, j))
		}
	}
}

func (w *nodeWalker) line(l int, path string) {
	if old, ok := w.lines[l]; ok && old != path && !strings.HasPrefix(path, old) {
		w.lines[l] = commonPath(old, path)
		return
	}
	w.lines[l] = path
}

func (w *nodeWalker) unknown(k *yaml.Node, t reflect.Type, path, kp string) error {
	var names []string
	for i := range t.NumField() {
		f := t.Field(i)
		if name := yamlName(f); name != "" {
			names = append(names, name)
		}
		if yamlName(f) == "" && f.Type == reflect.TypeFor[Secret]() && strings.EqualFold(f.Name, k.Value) {
			env := "BRIDGE_" + strings.ToUpper(strings.NewReplacer(".", "_").Replace(kp))
			return fmt.Errorf("%s:%d: config %s: secrets are never read from the file; set %s or %s_file", w.file, k.Line, kp, env, kp)
		}
	}
	s := closest(k.Value, names)
	if s != "" && path != "" {
		s = path + "." + s
	}
	return fmt.Errorf("%s:%d: config %s: unknown key%s", w.file, k.Line, kp, didYouMean(s))
}

var typeErrorLine = regexp.MustCompile(`^line (\d+): (.*)$`)

// typeError names the key of a yaml.v3 type error ("line 5: cannot
// unmarshal …").
func (w *nodeWalker) typeError(m string) error {
	sm := typeErrorLine.FindStringSubmatch(m)
	if sm == nil {
		return fmt.Errorf("%s: config: %s", w.file, m)
	}
	l, _ := strconv.Atoi(sm[1])
	return fmt.Errorf("%s:%d: config %s: %s", w.file, l, w.lines[l], sm[2])
}

// commonPath is the longest common dotted prefix of a and b.
func commonPath(a, b string) string {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	n := 0
	for n < len(as) && n < len(bs) && as[n] == bs[n] {
		n++
	}
	return strings.Join(as[:n], ".")
}

func fieldByYAML(t reflect.Type, name string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		if f := t.Field(i); yamlName(f) == name {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

func (c *Config) loadSecrets(env func(string) (string, bool)) error {
	secrets := []struct {
		dst    *Secret
		envKey string
		file   string
		key    string
	}{
		{&c.Amp.Token, "BRIDGE_AMP_TOKEN", c.Amp.TokenFile, "amp.token_file"},
		{&c.Kafka.SASL.Password, "BRIDGE_KAFKA_SASL_PASSWORD", c.Kafka.SASL.PasswordFile, "kafka.sasl.password_file"},
		{&c.Registry.Password, "BRIDGE_REGISTRY_PASSWORD", c.Registry.PasswordFile, "registry.password_file"},
		{&c.Registry.Token, "BRIDGE_REGISTRY_TOKEN", c.Registry.TokenFile, "registry.token_file"},
		{&c.Checkpoint.Redis.Password, "BRIDGE_CHECKPOINT_REDIS_PASSWORD", c.Checkpoint.Redis.PasswordFile, "checkpoint.redis.password_file"},
	}
	var errs []error
	for _, s := range secrets {
		if v, ok := env(s.envKey); ok && v != "" {
			*s.dst = Secret(v)
			continue
		}
		if s.file != "" {
			b, err := os.ReadFile(s.file)
			if err != nil {
				errs = append(errs, fmt.Errorf("config %s: reading secret: %w", s.key, err))
				continue
			}
			*s.dst = Secret(strings.TrimSpace(string(b)))
		}
	}
	return errors.Join(errs...)
}

// envName is the environment variable of a dotted key path:
// streams.0.sql is BRIDGE_STREAMS_0_SQL.
func envName(path string) string {
	return "BRIDGE_" + strings.ToUpper(strings.NewReplacer(".", "_", "-", "_").Replace(path))
}

// growStreams adds the streams that only the environment or -set flags
// configure: BRIDGE_STREAMS_0_ID and BRIDGE_STREAMS_0_SQL make a stream
// when the file has none. Indices are numbered from 0 without gaps.
func growStreams(c *Config, env func(string) (string, bool)) {
	var suffixes []string
	for _, p := range leafPaths("N") {
		if rest, ok := strings.CutPrefix(p, "streams.N."); ok {
			suffixes = append(suffixes, strings.TrimPrefix(envName(rest), "BRIDGE_"))
		}
	}
	for n := len(c.Streams); ; n++ {
		if !slices.ContainsFunc(suffixes, func(s string) bool {
			_, ok := env(fmt.Sprintf("BRIDGE_STREAMS_%d_%s", n, s))
			return ok
		}) {
			return
		}
		c.Streams = append(c.Streams, StreamConfig{})
	}
}

// secretEnv are the environment variables that hold secrets; they can't be
// set with -set (a command line is visible to every user of the machine).
var secretEnv = []string{"BRIDGE_AMP_TOKEN", "BRIDGE_KAFKA_SASL_PASSWORD", "BRIDGE_REGISTRY_PASSWORD", "BRIDGE_REGISTRY_TOKEN",
	"BRIDGE_CHECKPOINT_REDIS_PASSWORD"}

// notConfigEnv are BRIDGE_… variables the project itself uses that are not
// configuration keys, exempted deliberately: deploy/local/stack.sh,
// deploy/local/mvnbuild.sh and the test/… build scripts read
// BRIDGE_LOCAL_DIR (their state directory) and BRIDGE_PYTHON (the
// interpreter); the test suites read BRIDGE_TEST_* (style H16).
var notConfigEnv = []string{"BRIDGE_LOCAL_DIR", "BRIDGE_PYTHON"}

var streamEnv = regexp.MustCompile(`^BRIDGE_STREAMS_(\d+)_(.+)$`)

// checkEnvNames reports every BRIDGE_… variable in names that is no
// configuration key, with the closest valid one. nStreams is the number of
// streams configured.
func checkEnvNames(names []string, nStreams int) []error {
	var errs []error
	for _, name := range names {
		if strings.HasPrefix(name, "BRIDGE_TEST_") || slices.Contains(secretEnv, name) || slices.Contains(notConfigEnv, name) {
			continue
		}
		idx := "0"
		if m := streamEnv.FindStringSubmatch(name); m != nil {
			idx = m[1]
		}
		byEnv := map[string]string{}
		var cands []string
		for _, p := range leafPaths(idx) {
			byEnv[envName(p)] = p
			cands = append(cands, envName(p))
		}
		for _, s := range secretEnv {
			byEnv[s] = ""
		}
		if p, ok := byEnv[name]; ok {
			if n, _ := strconv.Atoi(idx); strings.HasPrefix(p, "streams.") && n >= nStreams {
				errs = append(errs, fmt.Errorf("environment %s: there is no streams[%d]; %d stream(s) are configured, and new ones are numbered from %d without gaps",
					name, n, nStreams, nStreams))
			}
			continue
		}
		msg := fmt.Sprintf("environment %s: no configuration key has this name", name)
		if s := closest(name, cands); s != "" {
			msg += fmt.Sprintf("; did you mean %s (%s)?", s, byEnv[s])
		}
		errs = append(errs, errors.New(msg))
	}
	return errs
}

// applyEnv overrides struct fields from environment variables named after
// their YAML path: BRIDGE_KAFKA_BROKERS=a:9092,b:9092 sets kafka.brokers,
// BRIDGE_STREAMS_0_SQL sets streams[0].sql. Lists take comma-separated
// values. Secrets (yaml:"-") are read separately. It returns every problem.
func applyEnv(v reflect.Value, prefix string, env func(string) (string, bool)) []error {
	var errs []error
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		tag := yamlName(f)
		if tag == "" {
			continue
		}
		name := prefix + "_" + strings.ToUpper(tag)
		fv := v.Field(i)
		if f.Type == streamsType {
			for j := range fv.Len() {
				errs = append(errs, applyEnv(fv.Index(j), fmt.Sprintf("%s_%d", name, j), env)...)
			}
			continue
		}
		if fv.Kind() == reflect.Struct {
			errs = append(errs, applyEnv(fv, name, env)...)
			continue
		}
		if fv.Kind() == reflect.Slice && fv.Type().Elem().Kind() == reflect.Struct {
			// A list of sections (streams[].labels) is set in the file only.
			if _, ok := env(name); ok {
				errs = append(errs, fmt.Errorf("environment %s: %s is a list of sections; set it in the YAML file", name, tag))
			}
			continue
		}
		raw, ok := env(name)
		if !ok {
			continue
		}
		if err := setFromString(fv, raw); err != nil {
			errs = append(errs, fmt.Errorf("environment %s=%q: %w", name, raw, err))
		}
	}
	return errs
}

func setFromString(fv reflect.Value, raw string) error {
	switch fv.Interface().(type) {
	case time.Duration:
		d, err := time.ParseDuration(raw)
		if err != nil {
			return fmt.Errorf("want a duration such as 100ms or 30s: %w", err)
		}
		fv.SetInt(int64(d))
		return nil
	case ByteSize:
		b, err := parseByteSize(raw)
		if err != nil {
			return err
		}
		fv.SetInt(int64(b))
		return nil
	}
	switch fv.Kind() {
	case reflect.String:
		fv.SetString(raw)
	case reflect.Bool:
		b, err := strconv.ParseBool(raw)
		if err != nil {
			return fmt.Errorf("want true or false")
		}
		fv.SetBool(b)
	case reflect.Int, reflect.Int64:
		n, err := strconv.ParseInt(raw, 10, 64)
		if err != nil {
			return fmt.Errorf("want a whole number")
		}
		fv.SetInt(n)
	case reflect.Uint64:
		n, err := strconv.ParseUint(raw, 10, 64)
		if err != nil {
			return fmt.Errorf("want a non-negative whole number")
		}
		fv.SetUint(n)
	case reflect.Float64:
		x, err := strconv.ParseFloat(raw, 64)
		if err != nil {
			return fmt.Errorf("want a number")
		}
		fv.SetFloat(x)
	case reflect.Slice:
		parts := strings.Split(raw, ",")
		out := reflect.MakeSlice(fv.Type(), 0, len(parts))
		for _, p := range parts {
			if p = strings.TrimSpace(p); p != "" {
				out = reflect.Append(out, reflect.ValueOf(p))
			}
		}
		fv.Set(out)
	default:
		return fmt.Errorf("unsupported field kind %s", fv.Kind())
	}
	return nil
}

// SetFlags collects repeated -set path=value flags: the same overrides as
// the BRIDGE_… environment variables, named by their YAML path
// (kafka.brokers=a:9092,b:9092, streams.0.sql=... or streams[0].sql=...).
// Flags win over the environment, which wins over the file. An unknown
// path is an error naming the closest valid key.
type SetFlags map[string]string

// String implements flag.Value.
func (s SetFlags) String() string { return fmt.Sprint(map[string]string(s)) }

// Set implements flag.Value.
func (s SetFlags) Set(v string) error {
	raw, value, ok := strings.Cut(v, "=")
	if !ok || strings.TrimSpace(raw) == "" {
		return fmt.Errorf("want -set path=value, e.g. -set kafka.brokers=127.0.0.1:9092")
	}
	path, idx := normalizePath(raw)
	name := envName(path)
	if slices.Contains(secretEnv, name) {
		return fmt.Errorf("-set %s: secrets come only from the environment (%s) or a file, never from the command line", path, name)
	}
	if idx == "" {
		idx = "0"
	}
	keys := leafPaths(idx)
	if !slices.Contains(keys, path) {
		return fmt.Errorf("-set %s: unknown key %s%s", raw, path, didYouMean(closest(path, keys)))
	}
	s[name] = value
	return nil
}

// Lookup returns an environment lookup where the flags win over env.
func (s SetFlags) Lookup(env func(string) (string, bool)) func(string) (string, bool) {
	return func(k string) (string, bool) {
		if v, ok := s[k]; ok {
			return v, true
		}
		return env(k)
	}
}
