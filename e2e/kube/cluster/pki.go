package cluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// A certificate the cluster needs: its file name, subject and use.
type certSpec struct {
	name   string
	cn     string
	org    string
	server bool // serverAuth (else clientAuth)
	ips    []string
	dns    []string
}

// writePKI makes a CA, each component's certificate and the kubeconfigs,
// keeping what already exists (so a restarted cluster keeps its identity).
// ECDSA P-256 throughout: Kubernetes accepts it for serving, client and
// service-account keys, and it is made in microseconds.
func writePKI(cfg Config) error {
	dir := cfg.pki()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	caCert, caKey, err := loadOrMakeCA(dir)
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(dir, "sa.key")); err != nil {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		if err := writeKey(filepath.Join(dir, "sa.key"), key); err != nil {
			return err
		}
		pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
		if err != nil {
			return err
		}
		if err := writePEM(filepath.Join(dir, "sa.pub"), "PUBLIC KEY", pub, 0o644); err != nil {
			return err
		}
	}
	specs := []certSpec{
		{name: "apiserver", cn: "kube-apiserver", server: true,
			ips: []string{NodeIP, "127.0.0.1", APIServiceIP},
			dns: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}},
		{name: "apiserver-kubelet-client", cn: "kube-apiserver-kubelet-client", org: "system:masters"},
		{name: "admin", cn: "kubernetes-admin", org: "system:masters"},
		{name: "controller-manager", cn: "system:kube-controller-manager"},
		{name: "scheduler", cn: "system:kube-scheduler"},
		{name: "kube-proxy", cn: "system:kube-proxy"},
		{name: "kubelet", cn: "system:node:" + cfg.NodeName, org: "system:nodes"},
		{name: "kubelet-server", cn: cfg.NodeName, server: true, ips: []string{NodeIP}, dns: []string{cfg.NodeName}},
	}
	for i, s := range specs {
		if _, err := os.Stat(filepath.Join(dir, s.name+".crt")); err == nil {
			continue
		}
		if err := makeCert(dir, s, int64(i+2), caCert, caKey); err != nil {
			return fmt.Errorf("kube: certificate %s: %w", s.name, err)
		}
	}
	// The kubeconfigs carry their certificates inline, as kubeadm writes
	// them: client-go watches certificate files for rotation with
	// goroutines that live as long as the process, which every client of
	// the suite would then keep.
	read := func(name string) ([]byte, error) { return os.ReadFile(filepath.Join(dir, name)) }
	ca, err := read("ca.crt")
	if err != nil {
		return err
	}
	for _, user := range []string{"admin", "controller-manager", "scheduler", "kube-proxy", "kubelet"} {
		crt, err := read(user + ".crt")
		if err != nil {
			return err
		}
		key, err := read(user + ".key")
		if err != nil {
			return err
		}
		kc := clientcmdapi.NewConfig()
		kc.Clusters["lameduck-e2e"] = &clientcmdapi.Cluster{
			Server:                   "https://" + NodeIP + ":6443",
			CertificateAuthorityData: ca,
		}
		kc.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificateData: crt, ClientKeyData: key}
		kc.Contexts["lameduck-e2e"] = &clientcmdapi.Context{Cluster: "lameduck-e2e", AuthInfo: user, Namespace: "default"}
		kc.CurrentContext = "lameduck-e2e"
		b, err := clientcmd.Write(*kc)
		if err != nil {
			return err
		}
		if err := writeIfChanged(filepath.Join(cfg.Run(), user+".kubeconfig"), b, 0o600); err != nil {
			return err
		}
	}
	return nil
}

func loadOrMakeCA(dir string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	crtPath, keyPath := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key")
	if crtPEM, err := os.ReadFile(crtPath); err == nil {
		keyPEM, err := os.ReadFile(keyPath)
		if err != nil {
			return nil, nil, err
		}
		cb, _ := pem.Decode(crtPEM)
		kb, _ := pem.Decode(keyPEM)
		if cb == nil || kb == nil {
			return nil, nil, errors.New("kube: " + dir + ": unreadable CA; remove the directory to make a new one")
		}
		crt, err := x509.ParseCertificate(cb.Bytes)
		if err != nil {
			return nil, nil, err
		}
		key, err := x509.ParseECPrivateKey(kb.Bytes)
		return crt, key, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "lameduck-e2e-ca"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().AddDate(10, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	crt, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	if err := writeKey(keyPath, key); err != nil {
		return nil, nil, err
	}
	return crt, key, writePEM(crtPath, "CERTIFICATE", der, 0o644)
}

func makeCert(dir string, s certSpec, serial int64, ca *x509.Certificate, caKey *ecdsa.PrivateKey) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: s.cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().AddDate(10, 0, 0),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		DNSNames:     s.dns,
	}
	if s.org != "" {
		tmpl.Subject.Organization = []string{s.org}
	}
	if s.server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	}
	for _, ip := range s.ips {
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.ParseIP(ip))
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	if err := writeKey(filepath.Join(dir, s.name+".key"), key); err != nil {
		return err
	}
	return writePEM(filepath.Join(dir, s.name+".crt"), "CERTIFICATE", der, 0o644)
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	return writePEM(path, "EC PRIVATE KEY", der, 0o600)
}

func writePEM(path, kind string, der []byte, mode os.FileMode) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), mode)
}
