// Package metrics defines the webhook's Prometheus metrics: pods gated,
// pods rejected by reason, the time spent answering admission requests,
// and the owners preset in effect.
package metrics

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Webhook names used as the "webhook" label of the latency histogram.
const (
	Mutating   = "mutating"
	Validating = "validating"
)

// Metrics records what the webhook decides.
type Metrics struct {
	gated    prometheus.Counter
	rejected *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	owners   *prometheus.GaugeVec
}

// OwnersPresets are the values of the owners gauge's "preset" label: the
// presets that can be in effect (auto resolves to one of them).
var OwnersPresets = []string{"alone", "beside-kueue"}

// New creates the webhook's metrics and registers them with reg (the
// controller-runtime registry in the service, a fresh one in tests).
func New(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		gated: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "webhook", Name: "pods_gated_total",
			Help: "Pods the webhook marked for queueing (gate, label, finalizer) at creation.",
		}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "webhook", Name: "pods_rejected_total",
			Help: "Pod creates and updates refused by validation, by the rule broken (one count per rule).",
		}, []string{"reason"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "sluice", Subsystem: "webhook", Name: "admission_duration_seconds",
			Help:    "Time to answer one admission request, by webhook.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16), // 100µs .. ~3.3s
		}, []string{"webhook"}),
		owners: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "sluice", Subsystem: "webhook", Name: "owners_preset",
			Help: "1 for the owners preset in effect (alone or beside-kueue; --owners=auto follows whether Kueue is installed), 0 for the other.",
		}, []string{"preset"}),
	}
	for _, c := range []prometheus.Collector{m.gated, m.rejected, m.latency, m.owners} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register webhook metrics: %w", err)
		}
	}
	return m, nil
}

// SetOwnersPreset records the owners preset in effect.
func (m *Metrics) SetOwnersPreset(inEffect string) {
	for _, p := range OwnersPresets {
		v := 0.0
		if p == inEffect {
			v = 1
		}
		m.owners.WithLabelValues(p).Set(v)
	}
}

// PodGated counts one pod marked for queueing.
func (m *Metrics) PodGated() { m.gated.Inc() }

// PodRejected counts one broken rule of a refused request.
func (m *Metrics) PodRejected(reason string) { m.rejected.WithLabelValues(reason).Inc() }

// ObserveSince records the time since start for the named webhook.
func (m *Metrics) ObserveSince(webhook string, start time.Time) {
	m.latency.WithLabelValues(webhook).Observe(time.Since(start).Seconds())
}
