// Tool calls through the openai client: the server answers with Laguna's
// XML tool call (from a scripted backend), the client sees OpenAI's
// tool_calls, whole, streamed, and through the stream helper.
import { check, client, run } from "./common.mjs";

const { openai, model } = client();

const tools = [
  {
    type: "function",
    function: {
      name: "get_weather",
      description: "Weather forecast for a city",
      parameters: {
        type: "object",
        properties: { city: { type: "string" }, days: { type: "integer" } },
        required: ["city"],
      },
    },
  },
];

const messages = [
  { role: "user", content: "Weather in Lyon?" },
  {
    role: "assistant",
    content: null,
    tool_calls: [{ id: "call_1", type: "function", function: { name: "get_weather", arguments: '{"city":"Lyon","days":1}' } }],
  },
  { role: "tool", tool_call_id: "call_1", content: "sunny" },
  { role: "user", content: "And Paris for three days?" },
];

function checkCall(calls, what) {
  check(Array.isArray(calls) && calls.length === 1, `${what}: one tool call`, calls);
  const c = calls[0];
  check(c.type === "function" && c.id.startsWith("call_") && c.function.name === "get_weather", `${what}: call`, c);
  const args = JSON.parse(c.function.arguments);
  check(args.city === "Paris" && args.days === 3, `${what}: arguments`, args);
}

async function main() {
  const whole = await openai.chat.completions.create({ model, messages, tools });
  const choice = whole.choices[0];
  check(choice.finish_reason === "tool_calls", "finish_reason", choice.finish_reason);
  checkCall(choice.message.tool_calls, "whole");
  check(choice.message.reasoning_content === "The user wants Paris.", "reasoning_content", choice.message);

  // Raw stream deltas.
  const deltas = [];
  let finish = null;
  for await (const chunk of await openai.chat.completions.create({ model, messages, tools, stream: true })) {
    for (const c of chunk.choices) {
      for (const tc of c.delta.tool_calls ?? []) deltas.push(tc);
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  check(finish === "tool_calls", "stream finish_reason", finish);
  checkCall(deltas, "stream");

  // The client's stream helper assembles the message.
  const stream = openai.chat.completions.stream({ model, messages, tools });
  const final = await stream.finalChatCompletion();
  checkCall(final.choices[0].message.tool_calls, "stream helper");

  return { arguments: choice.message.tool_calls[0].function.arguments };
}

run(main);
