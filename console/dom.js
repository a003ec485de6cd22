// Building the page from data without innerHTML: every value lands as text, so API data cannot inject markup.

/** h('button', {type: 'button', onclick}, 'Save') -> an element; `null`/`false` children are skipped. */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs ?? {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith('on')) el.addEventListener(key.slice(2), value);
    else if (key === 'class') el.className = value;
    else if (key === 'checked' || key === 'value' || key === 'disabled') el[key] = value;
    else el.setAttribute(key, value === true ? '' : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

/** A labelled input: the label wraps the control, so it is named for screen readers without ids. */
export function field(label, attrs) {
  return h('label', {}, h('span', {}, label), h('input', attrs));
}

export function replace(el, ...children) {
  el.replaceChildren(...children.flat(Infinity).filter((c) => c !== null && c !== undefined && c !== false));
}

/**
 * A form whose submit runs `action`; a failure shows in the form's own alert line (role=alert, so a
 * screen reader announces it) and the submit button is disabled while the request is out.
 */
export function form(attrs, children, action) {
  const error = h('p', { class: 'error', role: 'alert' });
  const el = h('form', attrs, children, error);
  el.addEventListener('submit', async (e) => {
    e.preventDefault();
    error.textContent = '';
    const buttons = [...el.querySelectorAll('button')];
    buttons.forEach((b) => { b.disabled = true; });
    try {
      await action(new FormData(el), e.submitter);
    } catch (err) {
      error.textContent = err.message;
    } finally {
      buttons.forEach((b) => { b.disabled = false; });
    }
  });
  return el;
}

/** A button that runs `action`, reporting a failure through `report`. */
export function button(label, action, report, attrs = {}) {
  const b = h('button', { type: 'button', ...attrs }, label);
  b.addEventListener('click', async () => {
    b.disabled = true;
    try {
      await action();
    } catch (err) {
      report(err.message);
    } finally {
      b.disabled = false;
    }
  });
  return b;
}
