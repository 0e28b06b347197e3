package cluster

import (
	"archive/tar"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"
	"k8s.io/client-go/tools/clientcmd"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The certificates chain to the CA, carry the names and uses each
// component checks, and the kubeconfigs point at them.
func TestPKI(t *testing.T) {
	cfg := Config{Work: t.TempDir(), NodeName: "node-a"}.withDefaults()
	if err := os.MkdirAll(cfg.Run(), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := writePKI(cfg); err != nil {
		t.Fatal(err)
	}
	read := func(name string) *x509.Certificate {
		b, err := os.ReadFile(filepath.Join(cfg.pki(), name+".crt"))
		if err != nil {
			t.Fatal(err)
		}
		blk, _ := pem.Decode(b)
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	pool := x509.NewCertPool()
	pool.AddCert(read("ca"))
	api := read("apiserver")
	if _, err := api.Verify(x509.VerifyOptions{Roots: pool, DNSName: "kubernetes.default.svc"}); err != nil {
		t.Errorf("apiserver certificate for kubernetes.default.svc: %v", err)
	}
	if _, err := api.Verify(x509.VerifyOptions{Roots: pool, DNSName: NodeIP}); err != nil {
		t.Errorf("apiserver certificate for %s: %v", NodeIP, err)
	}
	kl := read("kubelet")
	if kl.Subject.CommonName != "system:node:node-a" || len(kl.Subject.Organization) != 1 || kl.Subject.Organization[0] != "system:nodes" {
		t.Errorf("kubelet client certificate subject %v, want CN=system:node:node-a O=system:nodes (the Node authorizer's rule)", kl.Subject)
	}
	if _, err := kl.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("kubelet client certificate: %v", err)
	}
	kc, err := clientcmd.LoadFromFile(cfg.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	if s := kc.Clusters[kc.Contexts[kc.CurrentContext].Cluster].Server; s != "https://"+NodeIP+":6443" {
		t.Errorf("admin kubeconfig server %s", s)
	}
	// A second call keeps the identity.
	before, _ := os.ReadFile(filepath.Join(cfg.pki(), "ca.crt"))
	if err := writePKI(cfg); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.ReadFile(filepath.Join(cfg.pki(), "ca.crt")); string(after) != string(before) {
		t.Error("a second writePKI made a new CA")
	}
}

// The archive is an OCI image layout whose index names the image for
// containerd, with one manifest, and the binary at /<Binary>, executable.
func TestOCIArchive(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "prog")
	if err := os.WriteFile(bin, []byte("\x7fELF fake"), 0o755); err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(dir, "img.tar")
	im := Image{Name: "docker.io/library/x:1.0", Binary: "prog", Args: []string{"serve"}}
	if err := writeOCIArchive(im, bin, archive); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	files := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		files[h.Name] = b
	}
	for _, want := range []string{"oci-layout", "index.json"} {
		if _, ok := files[want]; !ok {
			t.Errorf("archive has no %s: %v", want, keys(files))
		}
	}
	var idx struct {
		Manifests []struct {
			MediaType   string
			Digest      string
			Annotations map[string]string
		}
	}
	if err := json.Unmarshal(files["index.json"], &idx); err != nil || len(idx.Manifests) != 1 {
		t.Fatalf("index.json: %v: %s", err, files["index.json"])
	}
	m := idx.Manifests[0]
	if m.MediaType != "application/vnd.oci.image.manifest.v1+json" || m.Annotations["io.containerd.image.name"] != im.Name ||
		m.Annotations["org.opencontainers.image.ref.name"] != "1.0" {
		t.Errorf("index.json's manifest: %+v", m)
	}
	var manifest struct {
		Config struct{ MediaType, Digest string }
		Layers []struct{ MediaType string }
	}
	if err := json.Unmarshal(files["blobs/sha256/"+strings.TrimPrefix(m.Digest, "sha256:")], &manifest); err != nil {
		t.Fatalf("manifest %s: %v", m.Digest, err)
	}
	if manifest.Config.MediaType != "application/vnd.oci.image.config.v1+json" || len(manifest.Layers) != 1 ||
		manifest.Layers[0].MediaType != "application/vnd.oci.image.layer.v1.tar+gzip" {
		t.Errorf("manifest: %+v", manifest)
	}
	var config struct {
		Architecture, OS string
		Config           struct{ Entrypoint, Cmd []string }
	}
	if err := json.Unmarshal(files["blobs/sha256/"+strings.TrimPrefix(manifest.Config.Digest, "sha256:")], &config); err != nil {
		t.Fatal(err)
	}
	if config.Architecture != "amd64" || config.OS != "linux" || strings.Join(config.Config.Entrypoint, " ") != "/prog" ||
		strings.Join(config.Config.Cmd, " ") != "serve" {
		t.Errorf("image config: %+v", config)
	}
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
