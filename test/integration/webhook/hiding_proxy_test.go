package webhook

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// hidingProxy is a plain-HTTP proxy to the suite's API server, with the
// suite's credentials, that keeps out of every watch passing through it
// the events of the objects of one resource whose names start with a
// prefix. A client watching through it never learns of those objects from
// its watch, as if the watch lagged behind; reading one still works, and
// the proxy counts those reads.
type hidingProxy struct {
	// resource is the path segment of the hidden objects' resource, e.g.
	// workloadpriorityclasses; prefix starts the names of those hidden.
	resource, prefix string
	// reads counts the requests that read a hidden object by name.
	reads atomic.Int64
}

// startHidingProxy serves a hidingProxy until the test ends and returns
// the path of a kubeconfig that reaches the API server through it.
func startHidingProxy(t *testing.T, resource, prefix string) (*hidingProxy, string) {
	t.Helper()
	upstream, err := url.Parse(s.env.Config.Host)
	if err != nil {
		t.Fatalf("API server address %q: %v", s.env.Config.Host, err)
	}
	transport, err := rest.TransportFor(s.env.Config)
	if err != nil {
		t.Fatalf("API server transport: %v", err)
	}
	h := &hidingProxy{resource: resource, prefix: prefix}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(upstream)
			if isWatch(r.In) {
				// Events are read as JSON: keep the client from asking
				// for protobuf.
				r.Out.Header.Set("Accept", jsonOnly(r.In.Header.Get("Accept")))
			}
		},
		Transport:      transport,
		FlushInterval:  -1, // a watch streams
		ModifyResponse: h.filter,
	}
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h.readsHidden(r) {
			h.reads.Add(1)
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(server.Close)

	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["proxy"] = &clientcmdapi.Cluster{Server: server.URL}
	cfg.AuthInfos["proxy"] = &clientcmdapi.AuthInfo{}
	cfg.Contexts["proxy"] = &clientcmdapi.Context{Cluster: "proxy", AuthInfo: "proxy"}
	cfg.CurrentContext = "proxy"
	if err := clientcmd.WriteToFile(*cfg, kubeconfig); err != nil {
		t.Fatalf("write kubeconfig: %v", err)
	}
	return h, kubeconfig
}

// readsHidden reports whether r reads one hidden object by name.
func (h *hidingProxy) readsHidden(r *http.Request) bool {
	dir, name := path.Split(r.URL.Path)
	return r.Method == http.MethodGet && !isWatch(r) && path.Base(dir) == h.resource && strings.HasPrefix(name, h.prefix)
}

// filter drops the hidden objects' events from a watch of their resource.
func (h *hidingProxy) filter(resp *http.Response) error {
	if !isWatch(resp.Request) || path.Base(resp.Request.URL.Path) != h.resource || resp.StatusCode != http.StatusOK {
		return nil
	}
	upstream := resp.Body
	filtered, w := io.Pipe()
	go func() {
		defer upstream.Close()
		w.CloseWithError(h.copyEvents(w, upstream))
	}()
	resp.Body = filtered
	resp.Header.Del("Content-Length")
	return nil
}

// copyEvents copies watch events from in to out, but those of hidden
// objects, until in ends.
func (h *hidingProxy) copyEvents(out io.Writer, in io.Reader) error {
	events := json.NewDecoder(in)
	for {
		var event json.RawMessage
		if err := events.Decode(&event); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		var of struct {
			Object struct {
				Metadata struct {
					Name string `json:"name"`
				} `json:"metadata"`
			} `json:"object"`
		}
		if err := json.Unmarshal(event, &of); err != nil {
			return err
		}
		if strings.HasPrefix(of.Object.Metadata.Name, h.prefix) {
			continue
		}
		if _, err := out.Write(append(event, '\n')); err != nil {
			return err
		}
	}
}

func isWatch(r *http.Request) bool {
	w := r.URL.Query().Get("watch")
	return w == "true" || w == "1"
}

// jsonOnly keeps the JSON media types of an Accept header.
func jsonOnly(accept string) string {
	var kept []string
	for _, mediaType := range strings.Split(accept, ",") {
		if strings.Contains(mediaType, "json") {
			kept = append(kept, strings.TrimSpace(mediaType))
		}
	}
	if len(kept) == 0 {
		return "application/json"
	}
	return strings.Join(kept, ",")
}
