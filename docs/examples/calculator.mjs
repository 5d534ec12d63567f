// A built-in tool, and a policy that keeps the model away from another tool. Sessions use the tool by
// listing {"name": "add", "execution": {"type": "builtin"}} in their tools.

export default {
  name: 'calculator',
  apply(ctx) {
    ctx.tools.register({
      name: 'add',
      description: 'Adds two numbers.',
      parameters: {
        type: 'object',
        properties: { a: { type: 'number' }, b: { type: 'number' } },
        required: ['a', 'b'],
      },
      // calls that return true here may run side by side with other parallel calls
      isConcurrencySafe: () => true,
      async execute(args, { signal }) {
        signal.throwIfAborted()
        if (typeof args?.a !== 'number' || typeof args?.b !== 'number') {
          return { content: 'Error: a and b must be numbers', isError: true }
        }
        return { content: String(args.a + args.b) }
      },
    })

    // tools/pre-execute decides, before any call runs: allow, deny (with a reason the model sees) or ask
    ctx.hooks.waterfall('tools/pre-execute', async (payload, next) => {
      if (payload.call.name === 'shell') return { kind: 'deny', reason: 'shell commands are not allowed here' }
      return next()
    })
  },
}
