package server

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"lagc/sched"
)

// metrics are the server's Prometheus series, in a registry of its own.
type metrics struct {
	reg                   *prometheus.Registry
	requests              *prometheus.CounterVec
	canceled              prometheus.Counter
	promptTokens          prometheus.Counter
	cachedTokens          prometheus.Counter
	generatedTokens       prometheus.Counter
	batchSize, stepTokens prometheus.Histogram
	stepTime              prometheus.Histogram
	ttft, itl             prometheus.Histogram
	load                  func() (waiting, running int)
}

func newMetrics(slots int) *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	latency := []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lagc_requests_total",
		Help: "HTTP requests by endpoint and status code."}, []string{"endpoint", "code"})
	m.canceled = prometheus.NewCounter(prometheus.CounterOpts{Name: "lagc_requests_canceled_total",
		Help: "Generations ended because the client went away."})
	m.promptTokens = prometheus.NewCounter(prometheus.CounterOpts{Name: "lagc_prompt_tokens_total",
		Help: "Prompt tokens of admitted requests."})
	m.cachedTokens = prometheus.NewCounter(prometheus.CounterOpts{Name: "lagc_prompt_tokens_cached_total",
		Help: "Prompt tokens reused from a sequence slot's KV cache instead of computed."})
	m.generatedTokens = prometheus.NewCounter(prometheus.CounterOpts{Name: "lagc_generation_tokens_total",
		Help: "Tokens generated."})
	m.batchSize = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "lagc_batch_size",
		Help:    "Sequences in one forward step (decode rows and prefill chunks).",
		Buckets: prometheus.LinearBuckets(1, 1, max(slots, 1))})
	m.stepTokens = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "lagc_step_tokens",
		Help: "Tokens (rows) in one forward step.", Buckets: prometheus.ExponentialBuckets(1, 2, 12)})
	m.stepTime = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "lagc_step_seconds",
		Help: "Time of one forward step with sampling.", Buckets: latency})
	m.ttft = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "lagc_time_to_first_token_seconds",
		Help: "From a request's admission to the queue to its first token.", Buckets: latency})
	m.itl = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "lagc_inter_token_latency_seconds",
		Help: "Between consecutive tokens of one request.", Buckets: latency})
	m.reg.MustRegister(m.requests, m.canceled, m.promptTokens, m.cachedTokens, m.generatedTokens,
		m.batchSize, m.stepTokens, m.stepTime, m.ttft, m.itl,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "lagc_queue_length",
			Help: "Requests waiting for a sequence slot."}, func() float64 { w, _ := m.loadNow(); return float64(w) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "lagc_running_requests",
			Help: "Requests holding a sequence slot."}, func() float64 { _, r := m.loadNow(); return float64(r) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "lagc_slots",
			Help: "Sequence slots (the largest batch)."}, func() float64 { return float64(slots) }),
	)
	return m
}

func (m *metrics) loadNow() (int, int) {
	if m.load == nil {
		return 0, 0
	}
	return m.load()
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

func (m *metrics) request(endpoint string, code int) {
	m.requests.WithLabelValues(endpoint, strconv.Itoa(code)).Inc()
}

func (m *metrics) step(st sched.StepStats) {
	m.batchSize.Observe(float64(st.Sequences))
	m.stepTokens.Observe(float64(st.DecodeRows + st.PrefillTokens))
	m.stepTime.Observe(st.Duration.Seconds())
}

func (m *metrics) token(first bool, latency time.Duration) {
	m.generatedTokens.Inc()
	if first {
		m.ttft.Observe(latency.Seconds())
	} else {
		m.itl.Observe(latency.Seconds())
	}
}
