package testenv

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"text/template"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"
)

// health polls the components' HTTPS endpoints, trusting only the local CA.
type health struct {
	client *http.Client
	token  string
}

func newHealth(c credentials) *health {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(c.caPEM)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
	return &health{client: &http.Client{Transport: tr}, token: c.token}
}

func (h *health) apiServerReady(ctx context.Context, url string) error {
	return h.get(ctx, url+"/readyz", true)
}

func (h *health) healthy(ctx context.Context, url string) error {
	return h.get(ctx, url, false)
}

func (h *health) get(ctx context.Context, url string, auth bool) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	if auth {
		req.Header.Set("Authorization", "Bearer "+h.token)
	}
	resp, err := h.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}

// nodeParams fill hack/kwok/node.yaml.
type nodeParams struct {
	Name   string
	CPU    string
	Memory string
	Pods   int
}

// NodeName is the name of the i-th kwok node (0-based).
func NodeName(i int) string { return fmt.Sprintf("kwok-node-%d", i) }

// createNodes creates the kwok nodes that do not exist yet from the shared
// node template.
func createNodes(ctx context.Context, cfg *rest.Config, f layout, o Options) error {
	raw, err := os.ReadFile(f.nodeTemplate)
	if err != nil {
		return fmt.Errorf("testenv: read node template: %w", err)
	}
	tmpl, err := template.New("node").Option("missingkey=error").Parse(string(raw))
	if err != nil {
		return fmt.Errorf("testenv: parse node template %s: %w", f.nodeTemplate, err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("testenv: clientset: %w", err)
	}
	for i := range o.Nodes {
		var buf bytes.Buffer
		p := nodeParams{Name: NodeName(i), CPU: o.Node.CPU, Memory: o.Node.Memory, Pods: o.Node.Pods}
		if err := tmpl.Execute(&buf, p); err != nil {
			return fmt.Errorf("testenv: render node template: %w", err)
		}
		var node corev1.Node
		if err := yaml.UnmarshalStrict(buf.Bytes(), &node); err != nil {
			return fmt.Errorf("testenv: decode node template %s: %w", f.nodeTemplate, err)
		}
		_, err := cs.CoreV1().Nodes().Create(ctx, &node, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("testenv: create node %s: %w", node.Name, err)
		}
	}
	return nil
}

// nodesReady succeeds once at least want kwok nodes are Ready.
func nodesReady(ctx context.Context, cfg *rest.Config, want int) error {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	list, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: NodeLabel + "=" + NodeLabelValue})
	if err != nil {
		return err
	}
	ready := 0
	for _, n := range list.Items {
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				ready++
			}
		}
	}
	if ready < want {
		return fmt.Errorf("%d of %d kwok nodes Ready", ready, want)
	}
	return nil
}
