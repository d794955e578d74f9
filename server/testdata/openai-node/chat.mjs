// Chat, text completions, streaming, errors, aborts and a bounded load of
// concurrent streams against the bundled model, through the openai client.
import OpenAI from "openai";
import { check, client, collectChat, run } from "./common.mjs";

const { openai, model } = client();

const ask = (text, extra = {}) => ({
  model,
  messages: [{ role: "user", content: text }],
  max_tokens: 24,
  temperature: 0,
  ...extra,
});

async function main() {
  const models = await openai.models.list();
  check(models.data.some((m) => m.id === model), "models.list", models.data);

  // Greedy chat, whole and streamed, give the same message.
  const whole = await openai.chat.completions.create(ask("Write a Go function"));
  const msg = whole.choices[0].message;
  check(whole.object === "chat.completion" && msg.role === "assistant", "chat completion", whole);
  check(typeof msg.reasoning_content === "string" && msg.reasoning_content.length > 0, "reasoning_content", msg);
  const streamed = await collectChat(
    await openai.chat.completions.create(ask("Write a Go function", { stream: true, stream_options: { include_usage: true } })),
  );
  check(streamed.ids.size === 1 && streamed.role === "assistant", "stream ids and role", [...streamed.ids]);
  check(streamed.reasoning === msg.reasoning_content && streamed.content === (msg.content ?? ""), "stream vs whole", { streamed, msg });
  check(streamed.finish === whole.choices[0].finish_reason, "finish reason", streamed.finish);
  check(streamed.usage?.completion_tokens === whole.usage.completion_tokens, "stream usage", streamed.usage);

  // Text completions, whole and streamed.
  const prompt = "func main() {";
  const comp = await openai.completions.create({ model, prompt, max_tokens: 32, temperature: 0 });
  let text = "";
  for await (const chunk of await openai.completions.create({ model, prompt, max_tokens: 32, temperature: 0, stream: true })) {
    text += chunk.choices[0]?.text ?? "";
  }
  check(text === comp.choices[0].text, "streamed completion", { text, whole: comp.choices[0].text });

  // Errors reach the client as typed API errors.
  let badRequest = null;
  try {
    await openai.chat.completions.create(ask("hi", { n: 500 }));
  } catch (e) {
    badRequest = e;
  }
  check(badRequest instanceof OpenAI.BadRequestError && badRequest.status === 400 && badRequest.param === "n", "n=500", String(badRequest));
  let overflow = null;
  try {
    await openai.chat.completions.create(ask("hi", { max_tokens: 1_000_000 }));
  } catch (e) {
    overflow = e;
  }
  check(overflow?.status === 400 && overflow.code === "context_length_exceeded", "context overflow", String(overflow));

  // A bounded load: concurrent streams, some aborted mid-way; the others
  // equal the same request served alone.
  const prompts = ["Explain channels", "Write a test", "What is a slice?", "Sort a map", "Parse JSON", "Read a file"];
  const alone = [];
  for (const p of prompts) alone.push(await collectChat(await openai.chat.completions.create(ask(p, { stream: true }))));
  let aborted = 0;
  const together = await Promise.all(
    prompts.map(async (p, i) => {
      const ac = new AbortController();
      const stream = await openai.chat.completions.create(ask(p, { stream: true, max_tokens: i % 3 === 2 ? 400 : 24 }), { signal: ac.signal });
      if (i % 3 !== 2) return collectChat(stream);
      // The client ends the iteration quietly (or with APIUserAbortError)
      // once its request is aborted.
      let n = 0;
      let finished = false;
      try {
        for await (const chunk of stream) {
          finished ||= chunk.choices.some((c) => c.finish_reason);
          if (++n === 3) ac.abort();
        }
      } catch (e) {
        if (!(e instanceof OpenAI.APIUserAbortError)) throw e;
      }
      if (ac.signal.aborted && !finished) aborted++;
      return null;
    }),
  );
  check(aborted === 2, "aborted streams", aborted);
  together.forEach((got, i) => {
    if (got === null) return;
    const want = alone[i];
    check(got.reasoning === want.reasoning && got.content === want.content && got.finish === want.finish, `load: request ${i}`, { got, want });
  });

  // Logprobs in the client's types: chat (whole and streamed) and
  // completions; penalties accepted.
  const lp = await openai.chat.completions.create(ask("Write a Go function", { logprobs: true, top_logprobs: 3, presence_penalty: 0.5, frequency_penalty: 0.5 }));
  const content = lp.choices[0].logprobs?.content ?? [];
  check(content.length === lp.usage.completion_tokens, "chat logprobs per token", { n: content.length, usage: lp.usage });
  for (const e of content) {
    check(typeof e.token === "string" && e.logprob <= 0 && Array.isArray(e.bytes) && e.top_logprobs.length === 3, "chat logprob entry", e);
    check(e.top_logprobs[0].logprob >= e.logprob, "top_logprobs order", e);
  }
  let streamedLp = 0;
  for await (const chunk of await openai.chat.completions.create(ask("Write a Go function", { stream: true, logprobs: true }))) {
    streamedLp += chunk.choices[0]?.logprobs?.content?.length ?? 0;
  }
  const plainLp = await openai.chat.completions.create(ask("Write a Go function", { logprobs: true }));
  check(streamedLp === plainLp.usage.completion_tokens, "streamed chat logprobs", { streamedLp, usage: plainLp.usage });
  const compLp = await openai.completions.create({ model, prompt, max_tokens: 32, temperature: 0, logprobs: 2 });
  const l = compLp.choices[0].logprobs;
  check(l.tokens.join("") === comp.choices[0].text && l.token_logprobs.length === 32 && l.top_logprobs.every((t) => Object.keys(t).length >= 1), "completion logprobs", l);

  // n choices, whole and streamed: greedy, so all equal the one-choice reply.
  const two = await openai.chat.completions.create(ask("Write a Go function", { n: 2 }));
  check(two.choices.length === 2 && two.choices.every((c, i) => c.index === i && c.message.reasoning_content === msg.reasoning_content), "n=2", two.choices);
  const byIndex = ["", "", ""];
  for await (const chunk of await openai.completions.create({ model, prompt, max_tokens: 32, temperature: 0, n: 3, stream: true })) {
    for (const c of chunk.choices) byIndex[c.index] += c.text;
  }
  check(byIndex.every((t) => t === comp.choices[0].text), "streamed n=3", byIndex);

  return { completion: comp.choices[0].text, chat_reasoning: msg.reasoning_content, aborted, logprob_tokens: content.length };
}

run(main);
