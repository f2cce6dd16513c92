package proxy

const (
	ccID    = "ca92e60e-3cb8-4c5e-8d21-fdf99ef4af9c" // a Claude Code session id
	billing = `{"type":"text","text":"x-anthropic-billing-header: cc_version=2.1.332.0b8; cc_entrypoint=cli;"}`
)

// fixedRand always picks tie number n (modulo the number of ties).
type fixedRand int

func (f fixedRand) IntN(n int) int { return int(f) % n }
