// The gateway's page: the served models, a widget per task, the server's state. No build step, no other host:
// every request goes to this gateway, on the routes any client uses (tritonhf/serve/page.py says which).
"use strict";

const KEY = "tritonhf.key"; // sessionStorage: this tab only, never in a URL
const POLL_MS = 2000;
const HISTORY = 150; // readings kept per model for the plot (five minutes)

const page = { models: [], selected: null, triton: "", previous: null, history: {}, chat: [] };

// ------------------------------------------------------------------------------------------------ requests

function authHeaders() {
  const key = sessionStorage.getItem(KEY);
  return key ? { Authorization: "Bearer " + key } : {};
}

class RequestError extends Error {}

async function send(path, init = {}) {
  const response = await fetch(path, { ...init, headers: { ...authHeaders(), ...(init.headers || {}) } });
  if (response.status === 401) {
    askForKey();
    throw new RequestError("This gateway needs its API key: enter it above.");
  }
  if (!response.ok) {
    let message = response.status + " " + response.statusText;
    try {
      const body = await response.json();
      const error = body.error;
      message = (error && (error.message || error)) || body.message || message;
    } catch (ignored) { /* not JSON: the status says it */ }
    throw new RequestError(String(message));
  }
  return response;
}

async function sendJSON(path, body) {
  const response = await send(path, {
    method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
  });
  return response.json();
}

function askForKey() {
  const form = document.getElementById("key-form");
  form.hidden = false;
  document.getElementById("key").focus();
}

// ------------------------------------------------------------------------------------------------ small DOM helpers

function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (name === "text") node.textContent = value;
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else if (value !== false && value !== null && value !== undefined) node.setAttribute(name, value === true ? "" : value);
  }
  for (const child of children) node.append(child);
  return node;
}

function fixed(value, digits = 3) {
  return Number(value).toFixed(digits);
}

function bars(rows) {
  // rows: [[label, score], ...], best first
  return el("div", { class: "bars" }, ...rows.map(([label, score]) => el("div", { class: "bar" },
    el("span", { class: "label", text: label }),
    el("span", { class: "track" }, el("span", { class: "fill", style: `display:block;width:${Math.max(0, Math.min(1, score)) * 100}%` })),
    el("span", { class: "score", text: fixed(score) }))));
}

function marked(text, spans) {
  // spans: [{start, end, label}] in order; the text with each span in a <mark> carrying its label
  const node = el("p", { class: "answer" });
  let at = 0;
  for (const span of spans) {
    if (span.start < at) continue;
    node.append(text.slice(at, span.start));
    node.append(el("mark", { title: span.label }, text.slice(span.start, span.end), el("small", { text: span.label })));
    at = span.end;
  }
  node.append(text.slice(at));
  return node;
}

function lines(text) {
  return text.split("\n").map((line) => line.trim()).filter((line) => line);
}

function python(value) {
  // a JSON value written as Python source
  if (value === null || value === undefined) return "None";
  if (value === true) return "True";
  if (value === false) return "False";
  if (Array.isArray(value)) return "[" + value.map(python).join(", ") + "]";
  if (typeof value === "object") return "{" + Object.entries(value).map(([k, v]) => JSON.stringify(k) + ": " + python(v)).join(", ") + "}";
  return JSON.stringify(value);
}

function sdk(call) {
  return `from tritonhf import Client\n\nwith Client(${JSON.stringify(page.triton || "grpc://127.0.0.1:8001")}) as client:\n    ${call}`;
}

function shellQuote(text) {
  return "'" + text.replace(/'/g, "'\\''") + "'";
}

function curl(path, body, extra = []) {
  const key = sessionStorage.getItem(KEY) ? ['-H "Authorization: Bearer $TRITONHF_GATEWAY_KEY"'] : [];
  const parts = ["curl -s " + location.origin + path, ...key, ...extra];
  if (body !== undefined) parts.push("-H 'Content-Type: application/json'", "-d " + shellQuote(JSON.stringify(body)));
  return parts.join(" \\\n  ");
}

function fileBase64(file) {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(String(reader.result).split(",", 2)[1]);
    reader.onerror = () => reject(reader.error);
    reader.readAsDataURL(file);
  });
}

// ------------------------------------------------------------------------------------------------ the widgets

// Each: what it is for, its fields [name, label, kind, default], its button, and run(model, values, show, update),
// which sends the request, shows the curl line and SDK code for it, and returns the node that shows the answer.
const modelPath = (model) => "/models/" + encodeURIComponent(model);

// The widgets that send one JSON body and show its answer: body(values, model), the SDK call for the same
// request, shown(answer, values); the model's URL (Hugging Face's shape) unless path says another route.
function jsonWidget({ about, fields, button, body, call, shown, path = modelPath }) {
  return {
    about, fields, button,
    async run(model, v, show) {
      const request = body(v, model);
      show(curl(path(model), request), sdk(call(model, v)));
      return shown(await sendJSON(path(model), request), v);
    },
  };
}

const labelsOf = (v) => v.labels.split(",").map((label) => label.trim()).filter((label) => label);

function chatWidget(pictures) {
  // a chat, streamed; with pictures (an image chat model), a picture picked or dropped goes with the message
  const fields = [["system", "System prompt", "text", ""], ["message", "Message", "textarea", pictures ? "What is in this picture?" : "Write a haiku about the sea."],
    ...(pictures ? [["picture", "Picture (optional: pick or drop one)", "file", "image/*"]] : []),
    ["temperature", "Temperature", "number", "0"], ["max_tokens", "Max tokens (empty: the model's default)", "number", ""],
    ["json", "JSON mode (the answer is a JSON object)", "checkbox", false]];
  return {
    about: pictures ? "A chat about pictures, streamed as it is generated: each message may carry a picture. The conversation goes on until you start a new one."
      : "A chat, streamed as it is generated. The conversation goes on until you start a new one.",
    fields,
    button: "Send",
    extra: [["New chat", () => { page.chat = []; document.getElementById("result").replaceChildren(); }]],
    async run(model, v, show, update) {
      const picture = pictures && v.picture ? v.picture : null;
      const url = picture ? `data:${picture.type || "image/png"};base64,${await fileBase64(picture)}` : null;
      page.chat.push(picture ? { role: "user", content: [{ type: "image_url", image_url: { url } }, { type: "text", text: v.message }], picture }
        : { role: "user", content: v.message });
      const turns = page.chat.map(({ role, content }) => ({ role, content }));
      const messages = [...(v.system ? [{ role: "system", content: v.system }] : []), ...turns];
      const options = { temperature: Number(v.temperature), ...(v.max_tokens ? { max_tokens: Number(v.max_tokens) } : {}) };
      const format = v.json ? { response_format: { type: "json_object" } } : {};
      const body = { model, messages, ...options, stream: true, ...format };
      // the code shown names each picture's file instead of its bytes
      const named = (content, file, bytes) => Array.isArray(content) ? content.map((part) => part.type !== "image_url" ? part
        : bytes ? { type: "image_url", image_url: { url: `data:${file.type || "image/png"};base64,BASE64 OF ${file.name}` } }
          : { type: "image", image: file.name }) : content;
      const shownMessages = (bytes) => [...(v.system ? [{ role: "system", content: v.system }] : []),
        ...page.chat.map((turn) => ({ role: turn.role, content: named(turn.content, turn.picture, bytes) }))];
      const formatted = v.json ? `, response_format={"type": "json_object"}` : "";
      show(curl("/v1/chat/completions", { ...body, messages: shownMessages(true) }, ["-N"]),
        sdk(`for piece in client.chat(${python(shownMessages(false))}, model=${python(model)}${Object.entries(options).map(([k, value]) => `, ${k}=${python(value)}`).join("")}${formatted}, stream=True):\n        print(piece, end="", flush=True)`));
      const transcript = el("div", { class: "transcript" });
      for (const turn of page.chat) {
        const text = Array.isArray(turn.content) ? turn.content.filter((part) => part.type === "text").map((part) => part.text).join("") : turn.content;
        if (turn.picture) transcript.append(el("img", { class: "preview", alt: turn.picture.name, src: URL.createObjectURL(turn.picture) }));
        transcript.append(el("p", { class: turn.role, text: `${turn.role}: ${text}` }));
      }
      const reasoning = el("p", { class: "reasoning" });
      const answer = el("p", { class: "answer assistant" });
      transcript.append(reasoning, answer);
      update(transcript);
      const response = await send("/v1/chat/completions", {
        method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
      });
      const reader = response.body.getReader();
      const decoder = new TextDecoder();
      let buffer = "", text = "", thought = "", finish = null;
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += decoder.decode(value, { stream: true });
        let end;
        while ((end = buffer.indexOf("\n\n")) >= 0) {
          const event = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          for (const line of event.split("\n")) {
            if (!line.startsWith("data: ") || line === "data: [DONE]") continue;
            const chunk = JSON.parse(line.slice(6));
            if (chunk.error) throw new RequestError(chunk.error.message || String(chunk.error));
            for (const choice of chunk.choices || []) {
              thought += choice.delta.reasoning_content || "";
              text += choice.delta.content || "";
              finish = choice.finish_reason || finish;
            }
            reasoning.textContent = thought;
            answer.textContent = text;
          }
        }
      }
      page.chat.push({ role: "assistant", content: text });
      answer.dataset.finished = finish || "stop";
      return transcript;
    },
  };
}

const WIDGETS = {
  "text-classification": jsonWidget({
    about: "Scores for each of the model's labels.",
    fields: [["text", "Text to classify", "textarea", "I really enjoyed this film, the acting was wonderful."]],
    button: "Classify",
    body: (v) => ({ inputs: v.text }),
    call: (model, v) => `print(client.classify(${python(v.text)}, model=${python(model)}, top_k=5))`,
    shown: (answer) => bars(answer[0].map((c) => [c.label, c.score])),
  }),
  "token-classification": jsonWidget({
    about: "Entities found in the text, highlighted with their labels.",
    fields: [["text", "Text to tag", "textarea", "My name is Sarah and I live in London, where I work for the BBC."]],
    button: "Find entities",
    body: (v) => ({ inputs: v.text }),
    call: (model, v) => `print(client.ner(${python(v.text)}, model=${python(model)}))`,
    shown(entities, v) {
      const node = el("div", {}, marked(v.text, entities.map((e) => ({ start: e.start, end: e.end, label: e.entity_group }))));
      node.append(el("ul", {}, ...entities.map((e) => el("li", { class: "entity", text: `${e.word}: ${e.entity_group} (${fixed(e.score)})` }))));
      if (!entities.length) node.append(el("p", { text: "No entities found." }));
      return node;
    },
  }),
  "fill-mask": jsonWidget({
    about: "The likeliest words for the mask: write the model's mask token ([MASK], or <mask> for RoBERTa-like models).",
    fields: [["text", "Text with one mask", "textarea", "Paris is the [MASK] of France."]],
    button: "Fill the mask",
    body: (v) => ({ inputs: v.text }),
    call: (model, v) => `print(client.fill_mask(${python(v.text)}, model=${python(model)}))`,
    shown: (candidates) => bars(candidates.map((c) => [c.token_str, c.score])),
  }),
  "question-answering": jsonWidget({
    about: "The answer, marked in the context it was read from.",
    fields: [["question", "Question", "text", "Where does Sarah live?"],
      ["context", "Context", "textarea", "My name is Sarah and I live in London."]],
    button: "Answer",
    body: (v) => ({ inputs: { question: v.question, context: v.context } }),
    call: (model, v) => `print(client.answer(${python(v.question)}, ${python(v.context)}, model=${python(model)}))`,
    shown: (found, v) => el("div", {}, el("p", { class: "found", text: `${found.answer} (${fixed(found.score)})` }),
      marked(v.context, [{ start: found.start, end: found.end, label: "answer" }])),
  }),
  "zero-shot-classification": jsonWidget({
    about: "Scores for labels you choose (left empty: the labels the model was added with).",
    fields: [["text", "Text to classify", "textarea", "The new phone has a great camera and the battery lasts two days."],
      ["labels", "Labels, separated by commas", "text", ""]],
    button: "Classify",
    body: (v) => (labelsOf(v).length ? { inputs: v.text, parameters: { candidate_labels: labelsOf(v) } } : { inputs: v.text }),
    call: (model, v) => `print(client.zero_shot(${python(v.text)}, model=${python(model)}${labelsOf(v).length ? `, labels=${python(labelsOf(v))}` : ""}))`,
    shown: (answer) => bars(answer.map((c) => [c.label, c.score])),
  }),
  "feature-extraction": jsonWidget({
    about: "The cosine similarity of every two sentences' embeddings.",
    fields: [["sentences", "Sentences, one per line", "textarea",
      "A man is eating food.\nA man is eating a piece of bread.\nThe girl is carrying a baby."]],
    button: "Compare",
    body: (v) => ({ inputs: lines(v.sentences) }),
    call: (model, v) => `vectors = client.embed(${python(lines(v.sentences))}, model=${python(model)})`,
    shown(vectors, v) {
      const sentences = lines(v.sentences);
      const norm = (a) => Math.sqrt(a.reduce((sum, x) => sum + x * x, 0));
      const cosine = (a, b) => a.reduce((sum, x, i) => sum + x * b[i], 0) / (norm(a) * norm(b));
      const head = el("tr", {}, el("th", { scope: "col", text: "" }), ...sentences.map((_, i) => el("th", { scope: "col", text: String(i + 1) })));
      const rows = sentences.map((sentence, i) => el("tr", {}, el("th", { scope: "row", text: `${i + 1}. ${sentence}` }),
        ...vectors.map((other) => el("td", { class: "similarity", text: fixed(cosine(vectors[i], other)) }))));
      return el("table", { class: "matrix" }, el("caption", { text: `${vectors[0].length} dimensions` }), el("thead", {}, head), el("tbody", {}, ...rows));
    },
  }),
  "text-ranking": jsonWidget({
    about: "The documents ordered by relevance to the query.",
    fields: [["query", "Query", "text", "What is the capital of France?"],
      ["documents", "Documents, one per line", "textarea", "Paris is the capital of France.\nBerlin is in Germany.\nThe Eiffel Tower is in Paris."]],
    button: "Rank",
    path: () => "/v1/rerank",
    body: (v, model) => ({ model, query: v.query, documents: lines(v.documents) }),
    call: (model, v) => `print(client.rerank(${python(v.query)}, ${python(lines(v.documents))}, model=${python(model)}))`,
    shown: (answer, v) => bars(answer.results.map((r) => [lines(v.documents)[r.index], r.relevance_score])),
  }),
  "text2text-generation": jsonWidget({
    about: "The model's text for yours: a summary, or a translation (the model decides).",
    fields: [["text", "Text", "textarea", "The tower is 324 metres tall, about the same height as an 81-storey building, and the tallest structure in Paris."]],
    button: "Generate",
    body: (v) => ({ inputs: v.text }),
    call: (model, v) => `print(client.summarize(${python(v.text)}, model=${python(model)}))`,
    shown: (answer) => el("p", { class: "answer", text: answer[0].summary_text }),
  }),
  "text-generation": chatWidget(false),
  "image-text-to-text": chatWidget(true),
  "image-classification": {
    about: "Scores for the model's labels: pick or drop a picture.",
    fields: [["image", "Picture", "file", "image/*"]],
    button: "Classify",
    async run(model, v, show) {
      const file = v.image;
      show(curl(modelPath(model), undefined, [`-H 'Content-Type: ${file.type || "application/octet-stream"}'`, `--data-binary @${shellQuote(file.name)}`]),
        sdk(`print(client.classify_images(${python(file.name)}, model=${python(model)}, top_k=5))`));
      const response = await send(modelPath(model), { method: "POST", headers: { "Content-Type": file.type || "application/octet-stream" }, body: file });
      const answer = await response.json();
      return el("div", {}, el("img", { class: "preview", alt: file.name, src: URL.createObjectURL(file) }), bars(answer.map((c) => [c.label, c.score])));
    },
  },
  "zero-shot-image-classification": {
    about: "Scores for labels you choose (left empty: the labels the model was added with).",
    fields: [["image", "Picture", "file", "image/*"], ["labels", "Labels, separated by commas", "text", ""]],
    button: "Classify",
    async run(model, v, show) {
      const file = v.image;
      const labels = labelsOf(v);
      const parameters = labels.length ? { candidate_labels: labels } : {};
      const body = { inputs: await fileBase64(file), parameters };
      const shown = { inputs: `BASE64 OF ${file.name}`, parameters };
      const given = labels.length ? `, labels=${python(labels)}` : "";
      show(curl(modelPath(model), shown), sdk(`print(client.zero_shot_images(${python(file.name)}, model=${python(model)}${given}))`));
      const answer = await sendJSON(modelPath(model), body);
      return el("div", {}, el("img", { class: "preview", alt: file.name, src: URL.createObjectURL(file) }), bars(answer.map((c) => [c.label, c.score])));
    },
  },
  "automatic-speech-recognition": {
    about: "The transcript, with its segments' times: pick a recording (WAV, FLAC, OGG, MP3) or record one.",
    fields: [["audio", "Recording", "file", "audio/*"]],
    button: "Transcribe",
    extra: [["Record from the microphone", (event) => record(event.target).catch((error) => {
      document.getElementById("result").replaceChildren(el("p", { class: "error", text: `No recording: ${error.message || error}` }));
    })]],
    async run(model, v, show) {
      const file = v.audio;
      const form = new FormData();
      form.append("file", file, file.name);
      form.append("model", model);
      form.append("response_format", "verbose_json");
      show(curl("/v1/audio/transcriptions", undefined, [`-F file=@${shellQuote(file.name)}`, `-F model=${model}`, "-F response_format=verbose_json"]),
        sdk(`found = client.transcribe(${python(file.name)}, model=${python(model)}, timestamps=True)\n    print(found.text, found.segments)`));
      const response = await send("/v1/audio/transcriptions", { method: "POST", body: form });
      const answer = await response.json();
      const rows = (answer.segments || []).map((s) => el("tr", {}, el("td", { text: fixed(s.start, 2) }), el("td", { text: fixed(s.end, 2) }), el("td", { class: "segment", text: s.text })));
      return el("div", {}, el("p", { class: "answer transcript-text", text: answer.text }),
        el("table", {}, el("caption", { text: "Segments (seconds)" }), el("thead", {}, el("tr", {}, el("th", { scope: "col", text: "Start" }), el("th", { scope: "col", text: "End" }), el("th", { scope: "col", text: "Text" }))), el("tbody", {}, ...rows)));
    },
  },
};

// The microphone: 16-bit mono WAV made here (what every served speech model reads), then put in the file field.
let recording = null;

async function record(button) {
  if (recording) {
    recording.stop();
    return;
  }
  const stream = await navigator.mediaDevices.getUserMedia({ audio: true });
  const context = new AudioContext();
  const source = context.createMediaStreamSource(stream);
  const processor = context.createScriptProcessor(4096, 1, 1);
  const chunks = [];
  processor.onaudioprocess = (event) => chunks.push(new Float32Array(event.inputBuffer.getChannelData(0)));
  source.connect(processor);
  processor.connect(context.destination);
  button.textContent = "Stop recording";
  recording = {
    stop() {
      processor.disconnect();
      source.disconnect();
      stream.getTracks().forEach((track) => track.stop());
      const file = new File([wav(chunks, context.sampleRate)], "recording.wav", { type: "audio/wav" });
      context.close();
      const input = document.querySelector('#widget-form input[type="file"]');
      const files = new DataTransfer();
      files.items.add(file);
      input.files = files.files;
      button.textContent = "Record from the microphone";
      recording = null;
    },
  };
}

function wav(chunks, rate) {
  const length = chunks.reduce((sum, chunk) => sum + chunk.length, 0);
  const view = new DataView(new ArrayBuffer(44 + length * 2));
  const text = (at, value) => [...value].forEach((c, i) => view.setUint8(at + i, c.charCodeAt(0)));
  text(0, "RIFF"); view.setUint32(4, 36 + length * 2, true); text(8, "WAVEfmt ");
  view.setUint32(16, 16, true); view.setUint16(20, 1, true); view.setUint16(22, 1, true);
  view.setUint32(24, rate, true); view.setUint32(28, rate * 2, true); view.setUint16(32, 2, true); view.setUint16(34, 16, true);
  text(36, "data"); view.setUint32(40, length * 2, true);
  let at = 44;
  for (const chunk of chunks) for (const sample of chunk) {
    view.setInt16(at, Math.max(-1, Math.min(1, sample)) * 0x7fff, true);
    at += 2;
  }
  return view.buffer;
}

// ------------------------------------------------------------------------------------------------ the models

function renderModels() {
  const list = document.getElementById("models");
  list.replaceChildren(...page.models.map((model) => {
    const button = el("button", { type: "button", "data-model": model.name, "aria-current": page.selected === model.name ? "true" : false,
      disabled: !model.ready, onclick: () => select(model.name) },
    el("strong", { text: model.name }),
    el("span", { class: "task", text: (model.task || "no task") + (model.ready ? "" : ` · ${model.state}`) }),
    el("span", { class: "engine", text: model.engine ? `engine: ${model.engine}` : "" }));
    if (model.engine_reason) button.title = model.engine_reason;
    return el("li", {}, button);
  }));
}

function select(name) {
  const model = page.models.find((m) => m.name === name);
  page.selected = name;
  page.chat = [];
  renderModels();
  const widget = WIDGETS[model.task];
  document.getElementById("widget-title").textContent = `${model.name} · ${model.task || "no task"}`;
  const about = [widget ? widget.about : "This model's task has no widget here: use its routes from code."];
  if (model.engine) about.push(`Engine: ${model.engine}${model.engine_reason ? ` (${model.engine_reason})` : ""}.`);
  if (model.reasoning) about.push("It thinks before it answers: its thinking is shown apart, in italics.");
  document.getElementById("widget-about").textContent = about.join(" ");
  const result = document.getElementById("result");
  result.replaceChildren();
  delete result.dataset.state;
  document.getElementById("code").hidden = true;
  const form = document.getElementById("widget-form");
  form.hidden = !widget;
  form.replaceChildren();
  if (!widget) return;
  for (const [name, label, kind, value] of widget.fields) {
    const id = "field-" + name;
    let input;
    if (kind === "textarea") input = el("textarea", { id, name, required: name !== "system" }, value);
    else if (kind === "file") input = el("input", { id, name, type: "file", accept: value, required: name !== "picture" });
    else if (kind === "checkbox") input = el("input", { id, name, type: "checkbox", checked: value });
    else if (kind === "number") input = el("input", { id, name, type: "number", value, step: "any", min: "0" });
    else input = el("input", { id, name, type: "text", value, required: name !== "labels" && name !== "system" });
    form.append(kind === "checkbox" ? el("div", { class: "row" }, input, el("label", { for: id, text: label }))
      : el("div", { class: "field" }, el("label", { for: id, text: label }), el("br"), input));
  }
  const buttons = el("div", { class: "row" }, el("button", { type: "submit", text: widget.button }));
  for (const [label, action] of widget.extra || []) buttons.append(el("button", { type: "button", text: label, onclick: action }));
  form.append(buttons);
  if (widget.fields.some(([, , kind]) => kind === "file")) dropTarget(form);
}

function dropTarget(form) {
  form.addEventListener("dragover", (event) => event.preventDefault());
  form.addEventListener("drop", (event) => {
    event.preventDefault();
    const input = form.querySelector('input[type="file"]');
    if (event.dataTransfer.files.length) input.files = event.dataTransfer.files;
  });
}

async function runWidget(event) {
  event.preventDefault();
  const model = page.models.find((m) => m.name === page.selected);
  const widget = WIDGETS[model.task];
  const form = event.target;
  const values = {};
  for (const [name, , kind] of widget.fields) {
    const input = form.elements[name];
    values[name] = kind === "file" ? input.files[0] : kind === "checkbox" ? input.checked : input.value;
  }
  const result = document.getElementById("result");
  const button = form.querySelector('button[type="submit"]');
  const show = (curlText, sdkText) => {
    document.getElementById("curl").textContent = curlText;
    document.getElementById("sdk").textContent = sdkText;
    document.getElementById("code").hidden = false;
  };
  const update = (node) => result.replaceChildren(node);
  result.replaceChildren(el("p", { text: "Working…" }));
  delete result.dataset.state;
  result.setAttribute("aria-busy", "true");
  button.disabled = true;
  try {
    update(await widget.run(model.name, values, show, update));
    result.dataset.state = "done";
  } catch (error) {
    update(el("p", { class: "error", text: error instanceof RequestError ? error.message : `Failed: ${error}` }));
    result.dataset.state = "error";
  } finally {
    result.removeAttribute("aria-busy");
    button.disabled = false;
  }
}

// ------------------------------------------------------------------------------------------------ the server

function spark(points) {
  if (points.length < 2) return el("span", { text: "" });
  const top = Math.max(...points, 1e-9);
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("class", "spark");
  svg.setAttribute("viewBox", `0 0 ${HISTORY - 1} 20`);
  svg.setAttribute("preserveAspectRatio", "none");
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", `compute time per request, last ${points.length} readings, at most ${fixed(top, 1)} ms`);
  const line = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
  const offset = HISTORY - points.length;
  line.setAttribute("points", points.map((p, i) => `${offset + i},${20 - (p / top) * 19}`).join(" "));
  svg.append(line);
  return svg;
}

function renderServer(state) {
  const now = performance.now();
  const previous = page.previous;
  const seconds = previous ? (now - previous.at) / 1000 : 0;
  const rows = [];
  for (const model of state.models) {
    const stats = (state.statistics || {})[model.name] || {};
    const figures = (state.figures || {})[model.name] || {};
    const before = previous ? (previous.statistics || {})[model.name] || {} : {};
    const figuresBefore = previous ? (previous.figures || {})[model.name] || {} : {};
    const per = (ns, count) => (count ? ns / count / 1e6 : null);
    const recent = per((stats.compute_ns || 0) - (before.compute_ns || 0), (stats.computed || 0) - (before.computed || 0));
    const history = page.history[model.name] = page.history[model.name] || [];
    if (previous) {
      history.push(recent || 0);
      if (history.length > HISTORY) history.shift();
    }
    const ttft = per((figures.tritonhf_time_to_first_token_seconds_sum || 0) * 1e9, figures.tritonhf_time_to_first_token_seconds_count || 0);
    const tokens = previous && seconds > 0 && "tritonhf_generated_tokens_total" in figures
      ? ((figures.tritonhf_generated_tokens_total || 0) - (figuresBefore.tritonhf_generated_tokens_total || 0)) / seconds : null;
    const batches = Object.entries(stats.batches || {}).map(([size, count]) => `${size}×${count}`).join(" ");
    const generating = "tritonhf_running_sequences" in figures
      ? `${figures.tritonhf_running_sequences} / ${figures.tritonhf_waiting_sequences || 0}` : "";
    const cell = (text) => el("td", { text: text === null || text === undefined ? "" : String(text) });
    rows.push(el("tr", { "data-model": model.name }, el("th", { scope: "row", text: model.name }),
      cell(stats.success), cell(stats.fail), cell(stats.queued ? fixed(per(stats.queue_ns, stats.queued), 2) : ""),
      cell(stats.computed ? fixed(per(stats.compute_ns, stats.computed), 2) : ""), cell(batches), cell(generating),
      cell(ttft === null ? "" : fixed(ttft, 1)), cell(tokens === null ? "" : fixed(tokens, 1)), el("td", {}, spark(history))));
  }
  document.getElementById("server-rows").replaceChildren(...rows);
  const missing = [];
  if (state.statistics === null) missing.push("Triton's statistics API is closed to the gateway: requests, times and batch sizes are left out.");
  if (state.figures === null) missing.push("The gateway does not read Triton's metrics (--metrics-url): the generation figures are left out.");
  document.getElementById("server-note").textContent = missing.join(" ");
  page.previous = { at: now, statistics: state.statistics, figures: state.figures };
}

async function poll() {
  try {
    const state = await (await send("/ui/state")).json();
    const names = state.models.map((m) => `${m.name}:${m.state}`).join(",");
    if (names !== page.models.map((m) => `${m.name}:${m.state}`).join(",")) {
      page.models = state.models;
      renderModels();
    }
    renderServer(state);
    document.getElementById("health").textContent = `${state.models.filter((m) => m.ready).length} models ready · Triton ${page.triton}`;
  } catch (error) {
    document.getElementById("health").textContent = error instanceof RequestError ? error.message : "The gateway does not answer.";
  }
}

async function start() {
  document.getElementById("key-form").addEventListener("submit", (event) => {
    event.preventDefault();
    sessionStorage.setItem(KEY, document.getElementById("key").value);
    event.target.hidden = true;
    poll();
  });
  document.getElementById("widget-form").addEventListener("submit", runWidget);
  for (const button of document.querySelectorAll("[data-copy]")) {
    button.addEventListener("click", () => navigator.clipboard.writeText(document.getElementById(button.dataset.copy).textContent));
  }
  try {
    page.triton = (await (await fetch("/health")).json()).triton || "";
  } catch (ignored) { /* shown by the first poll */ }
  await poll();
  setInterval(poll, POLL_MS);
}

start();
