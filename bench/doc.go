// Package bench is warden's load generator: closed-loop synthetic agent
// sessions (shared system prompt, unique first message, follow-up turns)
// against any OpenAI or Anthropic URL, in stages of concurrent sessions,
// with A/B switching of the warden's routing policy and the reference
// table's columns as markdown, CSV, JSON and an SVG chart.
package bench
