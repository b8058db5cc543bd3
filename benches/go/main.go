// Command nodeauth-micro-go measures upstream Kubernetes' Go code on the inputs nodeauth's
// micro-benchmark generates (`cargo xtask bench micro`), so both sides see identical bytes.
//
// It is only the upstream side of the comparison: CSR parse + self-signature check
// (crypto/x509, as kube-controller-manager's signer does), certificate issuance (the
// template and x509.CreateCertificate call of upstream's
// pkg/controller/certificates/authority), detached JWS sign/verify and bootstrap token
// parsing (k8s.io/cluster-bootstrap). Each operation is warmed up, then timed in batches;
// the median batch gives ns/op. Output: one JSON object per line.
package main

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"k8s.io/cluster-bootstrap/token/jws"
	"k8s.io/cluster-bootstrap/util/tokens"
)

// keyTypes are the CSR and CA key types, named as in the inputs directory.
var keyTypes = []string{"p256", "p384", "rsa2048", "ed25519"}

// serialNumberLimit is upstream's: serials are random below 2^128.
var serialNumberLimit = new(big.Int).Lsh(big.NewInt(1), 128)

type result struct {
	Op      string  `json:"op"`
	NsPerOp float64 `json:"ns_per_op"`
	Iters   uint64  `json:"iters"`
}

// loop is the timing discipline, identical to the Rust side's (benches/src/bin/micro):
// warm up for `warmup`, size a batch to take about `batch`, time `batches` batches and
// report the median batch's ns/op. Quick mode runs the operation once.
type loop struct {
	warmup, batch time.Duration
	batches       int
	quick         bool
}

func (l loop) measure(op string, f func() error) (result, error) {
	if err := f(); err != nil { // also proves the operation succeeds on these inputs
		return result{}, fmt.Errorf("%s: %w", op, err)
	}
	if l.quick {
		return result{Op: op, NsPerOp: 0, Iters: 1}, nil
	}
	// Warm-up, which also estimates the cost of one call.
	var n uint64
	start := time.Now()
	for time.Since(start) < l.warmup || n == 0 {
		if err := f(); err != nil {
			return result{}, fmt.Errorf("%s: %w", op, err)
		}
		n++
	}
	per := float64(time.Since(start).Nanoseconds()) / float64(n)
	size := uint64(float64(l.batch.Nanoseconds()) / per)
	if size < 1 {
		size = 1
	}
	samples := make([]float64, 0, l.batches)
	for b := 0; b < l.batches; b++ {
		t := time.Now()
		for i := uint64(0); i < size; i++ {
			if err := f(); err != nil {
				return result{}, fmt.Errorf("%s: %w", op, err)
			}
		}
		samples = append(samples, float64(time.Since(t).Nanoseconds())/float64(size))
	}
	sort.Float64s(samples)
	return result{Op: op, NsPerOp: median(samples), Iters: size * uint64(l.batches)}, nil
}

func median(s []float64) float64 {
	m := len(s) / 2
	if len(s)%2 == 1 {
		return s[m]
	}
	return (s[m-1] + s[m]) / 2
}

// sink keeps results alive so the compiler cannot drop the work.
var sink any

func main() {
	inputs := flag.String("inputs", "", "the inputs directory written by the Rust side (required)")
	quick := flag.Bool("quick", false, "run every operation once (a smoke test, no timing)")
	warmup := flag.Duration("warmup", 300*time.Millisecond, "warm-up time per operation")
	batch := flag.Duration("batch", 20*time.Millisecond, "target duration of one timed batch")
	batches := flag.Int("batches", 25, "timed batches per operation (the median is reported)")
	filter := flag.String("filter", "", "only operations whose name contains this")
	flag.Parse()
	if *inputs == "" {
		fmt.Fprintln(os.Stderr, "nodeauth-micro-go: -inputs DIR is required")
		os.Exit(2)
	}
	l := loop{warmup: *warmup, batch: *batch, batches: *batches, quick: *quick}
	if err := run(*inputs, *filter, l); err != nil {
		fmt.Fprintln(os.Stderr, "nodeauth-micro-go:", err)
		os.Exit(1)
	}
}

type bench struct {
	op string
	f  func() error
}

func run(dir, filter string, l loop) error {
	var benches []bench
	read := func(name string) ([]byte, error) { return os.ReadFile(filepath.Join(dir, name)) }

	// CSR parse + self-signature check, as upstream's signer does before issuing
	// (pem.Decode, x509.ParseCertificateRequest, CheckSignature).
	csrs := map[string]*x509.CertificateRequest{}
	for _, kt := range keyTypes {
		pemBytes, err := read("csr-" + kt + ".pem")
		if err != nil {
			return err
		}
		parse := func() (*x509.CertificateRequest, error) {
			block, _ := pem.Decode(pemBytes)
			if block == nil || block.Type != "CERTIFICATE REQUEST" {
				return nil, errors.New("no CERTIFICATE REQUEST block")
			}
			cr, err := x509.ParseCertificateRequest(block.Bytes)
			if err != nil {
				return nil, err
			}
			return cr, cr.CheckSignature()
		}
		cr, err := parse()
		if err != nil {
			return fmt.Errorf("csr-%s.pem: %w", kt, err)
		}
		csrs[kt] = cr
		benches = append(benches, bench{"csr/parse+verify/" + kt, func() error {
			cr, err := parse()
			sink = cr
			return err
		}}, bench{"csr/parse/" + kt, func() error {
			block, _ := pem.Decode(pemBytes)
			if block == nil {
				return errors.New("no PEM block")
			}
			cr, err := x509.ParseCertificateRequest(block.Bytes)
			sink = cr
			return err
		}})
	}

	// Issuance: a kubelet client certificate for the P-256 request (what kubelets send),
	// signed by a CA of each key type, with upstream's template (authority.go + the
	// PermissiveSigningPolicy: random 128-bit serial, key usages, BasicConstraints CA:false).
	subjectCSR := csrs["p256"]
	for _, kt := range keyTypes {
		caCert, caKey, err := loadCA(read, kt)
		if err != nil {
			return fmt.Errorf("ca-%s: %w", kt, err)
		}
		benches = append(benches, bench{"issue/ca-" + kt, func() error {
			der, err := issue(subjectCSR, caCert, caKey)
			sink = der
			return err
		}})
	}

	// The CA's signature alone (hash + sign a TBSCertificate-sized message): what an issuer
	// pays per certificate at least.
	tbs := make([]byte, tbsLen)
	for i := range tbs {
		tbs[i] = 0x5a
	}
	for _, kt := range keyTypes {
		_, caKey, err := loadCA(read, kt)
		if err != nil {
			return fmt.Errorf("ca-%s: %w", kt, err)
		}
		benches = append(benches, bench{"sign/ca-" + kt, func() error {
			sig, err := signMessage(caKey, tbs)
			sink = sig
			return err
		}})
	}

	// Detached JWS over cluster-info's kubeconfig, and token parsing.
	tokenBytes, err := read("token")
	if err != nil {
		return err
	}
	token := strings.TrimSpace(string(tokenBytes))
	kubeconfig, err := read("kubeconfig")
	if err != nil {
		return err
	}
	id, secret, err := tokens.ParseToken(token)
	if err != nil {
		return err
	}
	content := string(kubeconfig)
	sig, err := jws.ComputeDetachedSignature(content, id, secret)
	if err != nil {
		return err
	}
	// The Rust side's signature over the same bytes must be what upstream computes.
	if want, err := read("kubeconfig.jws"); err == nil && strings.TrimSpace(string(want)) != sig {
		return fmt.Errorf("kubeconfig.jws differs from upstream's signature %q", sig)
	}
	benches = append(benches,
		bench{"jws/sign", func() error {
			s, err := jws.ComputeDetachedSignature(content, id, secret)
			sink = s
			return err
		}},
		bench{"jws/verify", func() error {
			if !jws.DetachedTokenIsValid(sig, content, id, secret) {
				return errors.New("signature does not verify")
			}
			return nil
		}},
		bench{"token/parse", func() error {
			i, s, err := tokens.ParseToken(token)
			sink = i + s
			return err
		}},
	)

	enc := json.NewEncoder(os.Stdout)
	for _, b := range benches {
		if filter != "" && !strings.Contains(b.op, filter) {
			continue
		}
		r, err := l.measure(b.op, b.f)
		if err != nil {
			return err
		}
		if err := enc.Encode(r); err != nil {
			return err
		}
		runtime.GC() // each operation starts from a clean heap
	}
	return nil
}

func loadCA(read func(string) ([]byte, error), kt string) (*x509.Certificate, crypto.Signer, error) {
	certPEM, err := read("ca-" + kt + ".crt")
	if err != nil {
		return nil, nil, err
	}
	keyPEM, err := read("ca-" + kt + ".key")
	if err != nil {
		return nil, nil, err
	}
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, nil, errors.New("no PEM block")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil, err
	}
	key, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, nil, err
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, nil, fmt.Errorf("%T is not a crypto.Signer", key)
	}
	return cert, signer, nil
}

// tbsLen is the size of a kubelet client certificate's TBSCertificate, as on the Rust side.
const tbsLen = 450

// signMessage hashes and signs msg the way x509.CreateCertificate does with this key type.
func signMessage(key crypto.Signer, msg []byte) ([]byte, error) {
	switch k := key.Public().(type) {
	case ed25519.PublicKey:
		return key.Sign(rand.Reader, msg, crypto.Hash(0))
	case *ecdsa.PublicKey:
		if k.Curve.Params().BitSize == 384 {
			d := sha512.Sum384(msg)
			return key.Sign(rand.Reader, d[:], crypto.SHA384)
		}
		d := sha256.Sum256(msg)
		return key.Sign(rand.Reader, d[:], crypto.SHA256)
	default:
		d := sha256.Sum256(msg)
		return key.Sign(rand.Reader, d[:], crypto.SHA256)
	}
}

// issue is upstream's CertificateAuthority.Sign after the CSR is parsed and checked, with
// PermissiveSigningPolicy{TTL: 24h, Usages: digital signature, client auth, Backdate: 5m}
// applied as kube-controller-manager's csrsigning controller does.
func issue(cr *x509.CertificateRequest, ca *x509.Certificate, key crypto.Signer) ([]byte, error) {
	serial, err := rand.Int(rand.Reader, serialNumberLimit)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               cr.Subject,
		DNSNames:              cr.DNSNames,
		IPAddresses:           cr.IPAddresses,
		EmailAddresses:        cr.EmailAddresses,
		URIs:                  cr.URIs,
		PublicKeyAlgorithm:    cr.PublicKeyAlgorithm,
		PublicKey:             cr.PublicKey,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
		IsCA:                  false,
		NotBefore:             now.Add(-5 * time.Minute),
		NotAfter:              now.Add(24*time.Hour - 5*time.Minute),
	}
	if !tmpl.NotAfter.Before(ca.NotAfter) {
		tmpl.NotAfter = ca.NotAfter
	}
	return x509.CreateCertificate(rand.Reader, tmpl, ca, cr.PublicKey, key)
}
