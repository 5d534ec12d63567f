// The page: useChat from @ai-sdk/react against agentd's AI SDK routes (API.md §17.2), with a token the
// backend mints for the signed-in user (never the tenant key), tool calls rendered, approval buttons,
// and `resume: true`, so a reload in the middle of an answer shows it and goes on with it.
import { useChat } from '@ai-sdk/react'
import { DefaultChatTransport, lastAssistantMessageIsCompleteWithApprovalResponses } from 'ai'
import { useEffect, useState } from 'react'

const AGENT = __AGENT_ID__
const api = `/v1/ui/${AGENT}/chat`

// a token from our backend, asked for again a minute before it expires
let current
async function token() {
  if (!current || Date.parse(current.expiresAt) - Date.now() < 60_000) current = await (await fetch('/api/agent-token', { method: 'POST' })).json()
  return current.token
}
const auth = async () => ({ authorization: `Bearer ${await token()}` })

// one conversation per browser tab's storage: its id is the agentd session id
function chatId() {
  let id = localStorage.getItem('agentd-chat-id')
  if (!id) localStorage.setItem('agentd-chat-id', (id = crypto.randomUUID()))
  return id
}

export function App() {
  const [initial, setInitial] = useState(null)
  const id = chatId()
  useEffect(() => {
    // the history so far, for useChat's initial messages (a new chat has none: 404)
    auth()
      .then((headers) => fetch(`${api}/${id}/messages`, { headers }))
      .then(async (r) => setInitial(r.ok ? (await r.json()).messages : []))
  }, [id])
  if (!initial) return <p className="status">loading…</p>
  return <Chat id={id} initial={initial} />
}

function Chat({ id, initial }) {
  const [input, setInput] = useState('')
  const { messages, sendMessage, status, stop, addToolApprovalResponse } = useChat({
    id,
    messages: initial,
    resume: true,
    transport: new DefaultChatTransport({ api, headers: auth }),
    // once every approval is answered, the answers go to agentd and the turn goes on
    sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
  })
  const newChat = () => {
    localStorage.removeItem('agentd-chat-id')
    location.reload()
  }
  return (
    <main>
      <h1>agentd chat</h1>
      {messages.map((m) => (
        <div key={m.id} className={`message ${m.role}`} data-role={m.role}>
          {m.parts.map((part, i) => (
            <Part key={i} part={part} onApprove={(approved) => addToolApprovalResponse({ id: part.approval.id, approved })} />
          ))}
        </div>
      ))}
      <form
        onSubmit={(e) => {
          e.preventDefault()
          if (!input.trim()) return
          sendMessage({ text: input })
          setInput('')
        }}
      >
        <input data-testid="input" value={input} onChange={(e) => setInput(e.target.value)} placeholder="Say something (try: /call clean_up {&quot;folder&quot;: &quot;tmp&quot;})" />
        <button type="submit" disabled={status === 'streaming' || status === 'submitted'}>Send</button>
        {status === 'streaming' && (
          <button type="button" onClick={() => { stop(); auth().then((headers) => fetch(`${api}/${id}/stop`, { method: 'POST', headers })) }}>
            Stop
          </button>
        )}
      </form>
      <p className="status" data-testid="status">{status} · <a href="#" onClick={newChat}>new chat</a></p>
    </main>
  )
}

function Part({ part, onApprove }) {
  if (part.type === 'text') return <div className="bubble" data-testid="text">{part.text}</div>
  if (part.type === 'reasoning') return <div className="reasoning">{part.text}</div>
  if (part.type === 'dynamic-tool' || part.type.startsWith('tool-')) {
    const name = part.toolName ?? part.type.slice(5)
    return (
      <div className="tool" data-testid="tool" data-state={part.state}>
        <strong>{name}</strong> <code>{JSON.stringify(part.input ?? {})}</code> <em>{part.state}</em>
        {part.state === 'approval-requested' && (
          <div>
            <button data-testid="allow" onClick={() => onApprove(true)}>Allow</button>
            <button data-testid="deny" onClick={() => onApprove(false)}>Deny</button>
          </div>
        )}
        {part.state === 'output-available' && <div data-testid="tool-output">{typeof part.output === 'string' ? part.output : JSON.stringify(part.output)}</div>}
        {part.state === 'output-error' && <div className="error">{part.errorText}</div>}
      </div>
    )
  }
  return null
}
