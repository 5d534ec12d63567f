// A prompt section every session gets, and a check that refuses to start a step when the input
// mentions a banned word. Load with AGENTD_PLUGINS=docs/examples/house-rules.mjs.

const BANNED = ['password', 'credit card number']

export default {
  name: 'house-rules',
  apply(ctx) {
    // rendered into every session's system prompt, after the session's own `system` text
    ctx.systemPrompt.section('house-rules', 'Answer in English. Never ask for passwords.')

    // agent/pre-step runs before each step, with the messages the step is about to add
    ctx.hooks.waterfall('agent/pre-step', async (payload, next) => {
      const text = payload.messages
        .flatMap((m) => m.content)
        .map((block) => (block.type === 'text' ? block.text.toLowerCase() : ''))
        .join('\n')
      // returning without calling next() decides for every listener after this one
      if (BANNED.some((word) => text.includes(word))) return { kind: 'reject' }
      return next()
    })
  },
}
