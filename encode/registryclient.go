package encode

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/sr"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/tlsconfig"
)

// RegistryConfig is how the bridge reaches a Confluent-compatible schema
// registry: its URL, TLS (a CA file, a client certificate for mutual TLS),
// and basic or bearer authentication. The keys named in errors are
// bridge.yaml's (registry.*).
type RegistryConfig struct {
	// URL is the registry's base URL, http:// or https:// (for Apicurio
	// Registry, its Confluent API: https://host/apis/ccompat/v7).
	URL string
	// TLS configures https:// URLs: the CA that signed the registry's
	// certificate (default: the system roots) and the client certificate for
	// mutual TLS. Enabled needs an https:// URL; an https:// URL without it
	// verifies against the system roots.
	TLS tlsconfig.Config
	// Username and Password are basic-auth credentials, both or neither.
	Username string
	// Password is the basic-auth password.
	Password string
	// Token is a bearer token (Authorization: Bearer), an alternative to
	// basic auth.
	Token string
	// AllowPlaintextAuth lets credentials go to an http:// URL, where anyone
	// on the network path can read them. Default false: refused.
	AllowPlaintextAuth bool
	// Timeout bounds each request. Default 10s.
	Timeout time.Duration
}

// DefaultRegistryConfig returns the defaults (no URL: no registry).
func DefaultRegistryConfig() RegistryConfig {
	return RegistryConfig{Timeout: 10 * time.Second}
}

// Validate checks the combination of settings without reading files or
// connecting; every problem is returned, each naming its registry.* key.
func (c RegistryConfig) Validate() error {
	var errs []error
	u, err := url.Parse(c.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("registry.url %q: want http://host:port or https://host:port", c.URL)
	}
	if u.User != nil {
		errs = append(errs, errors.New("registry.url holds credentials: remove them and set registry.username with "+
			"registry.password_file (or BRIDGE_REGISTRY_PASSWORD) instead"))
	}
	if err := c.TLS.Validate("registry.tls"); err != nil {
		errs = append(errs, err)
	}
	if c.TLS.Enabled && u.Scheme != "https" {
		errs = append(errs, fmt.Errorf("registry.tls.enabled is true but registry.url %q is http://; use an https:// URL", c.URL))
	}
	switch {
	case c.Username != "" && c.Password == "":
		errs = append(errs, errors.New("registry.username is set without a password: set registry.password_file or BRIDGE_REGISTRY_PASSWORD"))
	case c.Username == "" && c.Password != "":
		errs = append(errs, errors.New("a registry password is set (registry.password_file or BRIDGE_REGISTRY_PASSWORD) without registry.username"))
	}
	if c.Token != "" && c.Username != "" {
		errs = append(errs, errors.New("registry.username (basic auth) and a registry token (registry.token_file or BRIDGE_REGISTRY_TOKEN) "+
			"are both set: use one of them"))
	}
	if (c.Token != "" || c.Password != "") && u.Scheme != "https" && !c.AllowPlaintextAuth {
		errs = append(errs, fmt.Errorf("registry credentials would be sent in clear text to registry.url %q: use an https:// URL "+
			"(with registry.tls), or set registry.allow_plaintext_auth: true on a trusted network", c.URL))
	}
	if c.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("registry.timeout %s: want a positive duration such as 10s", c.Timeout))
	}
	return errors.Join(errs...)
}

// NewRegistryClient validates c, loads its TLS files (through the one TLS
// loader) and returns a franz-go sr client for it.
func NewRegistryClient(c RegistryConfig) (*sr.Client, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	tc, err := tlsconfig.Load("registry.tls", c.TLS)
	if err != nil {
		return nil, err
	}
	tr, ok := http.DefaultTransport.(*http.Transport)
	if !ok {
		return nil, errors.New("http.DefaultTransport is not an *http.Transport")
	}
	tr = tr.Clone()
	if tc != nil {
		tr.TLSClientConfig = tc
	}
	opts := []sr.ClientOpt{sr.URLs(c.URL), sr.HTTPClient(&http.Client{Timeout: c.Timeout, Transport: tr})}
	switch {
	case c.Username != "":
		opts = append(opts, sr.BasicAuth(c.Username, c.Password))
	case c.Token != "":
		opts = append(opts, sr.BearerToken(c.Token))
	}
	cl, err := sr.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("configuring the schema registry client: %w", err)
	}
	return cl, nil
}

// Errors of the registry's access checks, matched by a *RegistryAccessError.
var (
	// ErrRegistryAuth means the registry refused the credentials (401).
	ErrRegistryAuth = errors.New("the schema registry refused the credentials")
	// ErrRegistryPermission means the registry authenticated the bridge but
	// does not let it do what it asked (403).
	ErrRegistryPermission = errors.New("the schema registry denied the request")
	// ErrRegistryTLS means the TLS handshake with the registry failed: its
	// certificate is not trusted or not for the name dialled, or it wants a
	// client certificate it did not get or does not accept.
	ErrRegistryTLS = errors.New("TLS handshake with the schema registry failed")
)

// RegistryAccessError is a refusal by the registry or by TLS to it that a
// retry does not fix. It matches its Kind (ErrRegistryAuth,
// ErrRegistryPermission, ErrRegistryTLS) and unwraps to the client's error.
type RegistryAccessError struct {
	// Kind is ErrRegistryAuth, ErrRegistryPermission or ErrRegistryTLS.
	Kind error
	// URL is registry.url.
	URL string
	// Fix says what to change, naming the configuration keys.
	Fix string
	// Status is the HTTP status of a refusal ("HTTP 401 Unauthorized");
	// empty for a TLS failure, whose text is Err's.
	Status string
	// Err is the client's error.
	Err error
}

// Error says what was refused and how to fix it.
func (e *RegistryAccessError) Error() string {
	cause := e.Status
	if cause == "" {
		cause = e.Err.Error()
	}
	return fmt.Sprintf("schema registry at %s: %s: %s: %s", e.URL, e.Kind, cause, e.Fix)
}

// Is reports whether target is the error's Kind.
func (e *RegistryAccessError) Is(target error) bool { return target == e.Kind }

// Unwrap returns the client's error.
func (e *RegistryAccessError) Unwrap() error { return e.Err }

// classifyRegistryError returns a *RegistryAccessError for a refusal that a
// retry does not fix and err itself otherwise (a refused connection or a
// timeout is transient). A connection to an https:// registry that ended
// without a word may be a refused client certificate whose alert was
// overtaken by the reset: a connection of its own that waits for the
// registry tells, and its alert joins err (explainDropped).
func classifyRegistryError(ctx context.Context, c RegistryConfig, err error) error {
	if err == nil {
		return nil
	}
	var ae *RegistryAccessError
	if errors.As(err, &ae) {
		return err
	}
	err = explainDropped(ctx, c, err)
	e := &RegistryAccessError{URL: c.URL, Err: err}
	var re *sr.ResponseError
	var verr *tls.CertificateVerificationError
	var hostErr x509.HostnameError
	var authErr x509.UnknownAuthorityError
	if errors.As(err, &re) {
		// The body of a refusal is not always text (Apicurio gzips it).
		e.Status = fmt.Sprintf("HTTP %d %s", re.StatusCode, http.StatusText(re.StatusCode))
	}
	switch {
	case errors.As(err, &re) && re.StatusCode == http.StatusUnauthorized:
		e.Kind = ErrRegistryAuth
		switch {
		case c.Username != "":
			e.Fix = fmt.Sprintf("user %q or its password is wrong: check registry.username and the password in registry.password_file or BRIDGE_REGISTRY_PASSWORD", c.Username)
		case c.Token != "":
			e.Fix = "the token was refused (expired, or not for this registry): replace it in registry.token_file or BRIDGE_REGISTRY_TOKEN"
		default:
			e.Fix = "the registry requires authentication: set registry.username with registry.password_file (or BRIDGE_REGISTRY_PASSWORD), " +
				"or a bearer token in registry.token_file (or BRIDGE_REGISTRY_TOKEN)"
		}
	case errors.As(err, &re) && re.StatusCode == http.StatusForbidden:
		e.Kind = ErrRegistryPermission
		e.Fix = "the bridge's registry user may not read and register schemas: grant it a role that may (Apicurio: sr-developer; " +
			"Confluent RBAC: DeveloperWrite on the <topic>-value and <topic>-key subjects)"
	case errors.As(err, &hostErr):
		e.Kind = ErrRegistryTLS
		e.Fix = "the registry's certificate is not for the name dialled: set registry.tls.server_name to a name the certificate holds, or registry.url to one"
	case errors.As(err, &verr) || errors.As(err, &authErr):
		e.Kind = ErrRegistryTLS
		if c.TLS.CAFile == "" {
			e.Fix = "the registry's certificate is not signed by a CA of the system: set registry.tls.ca_file to the CA that signed it (with registry.tls.enabled: true)"
		} else {
			e.Fix = fmt.Sprintf("the registry's certificate is not signed by the CA in registry.tls.ca_file %s: set it to the CA that signed the registry's certificate", c.TLS.CAFile)
		}
	case strings.HasPrefix(c.URL, "https://") && strings.Contains(err.Error(), "remote error: tls:"):
		e.Kind = ErrRegistryTLS
		if c.TLS.CertFile == "" {
			e.Fix = "the registry refused the handshake; it requires a client certificate (mutual TLS): set registry.tls.cert_file/key_file " +
				"to a certificate signed by a CA the registry trusts"
		} else {
			e.Fix = fmt.Sprintf("the registry refused the client certificate in registry.tls.cert_file %s: set registry.tls.cert_file/key_file "+
				"to a valid certificate signed by a CA the registry trusts", c.TLS.CertFile)
		}
	default:
		return err
	}
	return e
}

// explainDropped is err with the registry's TLS alert joined when err is a
// dropped connection to an https:// URL and a connection that waits for
// the registry's answer gets one (tlsconfig.ExplainDropped); err itself
// otherwise.
func explainDropped(ctx context.Context, c RegistryConfig, err error) error {
	u, perr := url.Parse(c.URL)
	if perr != nil || u.Scheme != "https" || !tlsconfig.Dropped(err) {
		return err
	}
	tc, lerr := tlsconfig.Load("registry.tls", c.TLS)
	if lerr != nil {
		return err
	}
	if tc == nil {
		tc = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "443")
	}
	_, joined := tlsconfig.ExplainDropped(ctx, host, tc, err)
	return joined
}
