// DOM helpers of the console. Every piece of text from the server is set with textContent, never
// parsed as HTML.

export const $ = (id) => document.getElementById(id)

/** Builds an element. `attrs` keys: class, text, dataset (object), on<event> handlers, others as attributes. */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag)
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue
    if (k === 'class') el.className = v
    else if (k === 'text') el.textContent = String(v)
    else if (k === 'dataset') Object.assign(el.dataset, v)
    else if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v)
    else if (v === true) el.setAttribute(k, '')
    else el.setAttribute(k, String(v))
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue
    el.append(c instanceof Node ? c : document.createTextNode(String(c)))
  }
  return el
}

// error boxes on screen, so that the next action that succeeds can clear every one of them
const shown = new Set()

/** Shows `err` (an ApiError or a sentence) in the error box `el`; a falsy `err` hides it. */
export function showError(el, err) {
  el.hidden = !err
  el.textContent = err ? String(err) : ''
  if (err) shown.add(el)
  else shown.delete(el)
}

/** Hides every error box: called when a user action succeeds, so no stale error stays on screen. */
export function clearErrors() {
  for (const el of [...shown]) showError(el, null)
}
