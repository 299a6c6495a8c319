"""Function-calling tasks (a task family): synthetic training tasks in BFCL's format, and `FunctionCallEnv`,
the environment that serves them and BFCL's own entries (lesson 05).

ToolRL trains on a mix of public function-calling sets; we have no hub, so we generate tasks from a small
catalogue of typed functions with request templates. Each task looks exactly like a BFCL entry (so the
same environment, prompt and AST checker serve both), plus `gold_calls` for the reward functions:

    {"id", "category", "messages": [{"role": "user", "content": ...}], "question",
     "functions": [BFCL-style descriptions], "possible_answer": [{name: {param: [value, ...]}}] or None,
     "gold_calls": [{"name": ..., "arguments": {...}}]}

Categories mirror BFCL's: simple (one function offered, one call), multiple (one call, 2–4 functions
offered), parallel (the same function twice), parallel_multiple (two different functions) and
irrelevance (no offered function fits: the right output is no call). Function names, requests and values
are our own; `tests/test_synthetic_calls.py` checks that no name or request coincides with BFCL's.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agentrl_lite.chat import ToolCall, format_tool_call
from agentrl_lite.episode import Episode
from agentrl_lite.tasks.bfcl import SYSTEM_PROMPT, check_text, tool_schema
from agentrl_lite.tools import Toolbox

CATEGORY_WEIGHTS = {"simple": 0.3, "multiple": 0.25, "parallel": 0.15, "parallel_multiple": 0.15,
                    "irrelevance": 0.15}

CITIES = ["Lisbon", "Nairobi", "Osaka", "Quito", "Tallinn", "Hanoi", "Perth", "Montreal", "Cusco", "Bergen",
          "Accra", "Valencia", "Tbilisi", "Busan", "Leipzig", "Cordoba"]
CURRENCIES = ["EUR", "USD", "JPY", "GBP", "CHF", "INR", "BRL", "KES"]
LANGUAGES = ["French", "Swahili", "Korean", "Portuguese", "Finnish", "Hindi", "Dutch", "Turkish"]
NAMES = ["Amara", "Bilal", "Chen", "Dagny", "Esme", "Farid", "Greta", "Hiro", "Ines", "Jonas", "Kofi", "Lena"]
ITEMS = ["oat milk", "rye bread", "green tea", "basmati rice", "olive oil", "dark chocolate", "lentils"]
TOPICS = ["volcanoes", "jazz history", "sourdough", "tidal energy", "chess openings", "bird migration"]
UNITS_LEN = ["km", "mi", "m", "ft"]
GENRES = ["thriller", "documentary", "comedy", "animation", "drama"]


@dataclass
class Param:
    name: str
    type: str  # BFCL's types: string, integer, float, boolean, array
    description: str
    values: list[Any]
    required: bool = True
    items: str | None = None  # item type of an array


@dataclass
class Function:
    name: str
    description: str
    domain: str
    params: list[Param]
    requests: list[str]
    """templates; `{param}` placeholders are filled with the call's values"""
    optional_phrases: dict[str, str] = field(default_factory=dict)
    """optional param → phrase appended when it is used, e.g. {"unit": " in {unit}"}"""

    def describe(self) -> dict[str, Any]:
        properties = {}
        for p in self.params:
            spec: dict[str, Any] = {"type": p.type, "description": p.description}
            if p.items:
                spec["items"] = {"type": p.items}
            properties[p.name] = spec
        return {"name": self.name, "description": self.description,
                "parameters": {"type": "dict", "properties": properties,
                               "required": [p.name for p in self.params if p.required]}}


def _nums(lo: int, hi: int, step: int = 1) -> list[int]:
    return list(range(lo, hi + 1, step))


CATALOGUE: list[Function] = [
    Function("forecast_lookup", "Get the weather forecast for a city a number of days ahead.", "weather",
             [Param("city", "string", "The city name.", CITIES), Param("days_ahead", "integer", "Days from today, 0-7.", _nums(1, 7))],
             ["What will the weather be in {city} in {days_ahead} days?", "Give me the forecast for {city}, {days_ahead} days from now."]),
    Function("air_quality_index", "Current air quality index of a city.", "weather",
             [Param("city", "string", "The city name.", CITIES)],
             ["How clean is the air in {city} right now?", "What is the air quality index in {city}?"]),
    Function("fx_convert", "Convert an amount of money between two currencies.", "finance",
             [Param("amount", "float", "The amount to convert.", [12.5, 40.0, 99.9, 250.0, 1200.0, 75.25]),
              Param("source", "string", "ISO code of the currency to convert from.", CURRENCIES),
              Param("target", "string", "ISO code of the currency to convert to.", CURRENCIES)],
             ["Convert {amount} {source} to {target}.", "How much is {amount} {source} in {target}?"]),
    Function("loan_installment", "Monthly installment of a fixed-rate loan.", "finance",
             [Param("principal", "integer", "Borrowed amount.", [5000, 12000, 30000, 250000]),
              Param("annual_rate", "float", "Yearly interest rate in percent.", [2.5, 3.9, 4.25, 6.0, 7.5]),
              Param("months", "integer", "Loan duration in months.", [12, 24, 36, 60, 240])],
             ["What is the monthly payment on a {principal} loan at {annual_rate}% over {months} months?",
              "I borrow {principal} for {months} months at {annual_rate} percent a year. Monthly installment?"]),
    Function("stock_quote", "Latest price of a stock ticker.", "finance",
             [Param("ticker", "string", "The ticker symbol.", ["ACME", "ZNTH", "QRKX", "BLUF", "NOVA"])],
             ["What is {ticker} trading at?", "Get me the latest quote for {ticker}."]),
    Function("translate_phrase", "Translate a short phrase into a target language.", "language",
             [Param("phrase", "string", "The text to translate.", ["good morning", "where is the station", "thank you very much", "see you tomorrow"]),
              Param("language", "string", "The target language.", LANGUAGES)],
             ["Translate '{phrase}' into {language}.", "How do you say '{phrase}' in {language}?"]),
    Function("word_definition", "Dictionary definition of an English word.", "language",
             [Param("word", "string", "The word to define.", ["serendipity", "ephemeral", "laconic", "ubiquitous", "quixotic"])],
             ["What does '{word}' mean?", "Define the word {word}."]),
    Function("rectangle_area", "Area of a rectangle.", "geometry",
             [Param("width", "float", "Width of the rectangle.", [3.0, 4.5, 7.0, 12.0, 2.25]),
              Param("height", "float", "Height of the rectangle.", [2.0, 5.5, 8.0, 10.0, 6.75])],
             ["What is the area of a rectangle {width} wide and {height} high?", "Compute the area of a {width} by {height} rectangle."]),
    Function("cylinder_volume", "Volume of a cylinder.", "geometry",
             [Param("radius", "float", "Radius of the base.", [1.5, 2.0, 3.0, 4.5]),
              Param("height", "float", "Height of the cylinder.", [5.0, 7.5, 10.0, 12.0])],
             ["Find the volume of a cylinder with radius {radius} and height {height}.", "A cylinder has radius {radius} and height {height}. What is its volume?"]),
    Function("gcd_of", "Greatest common divisor of two integers.", "math",
             [Param("a", "integer", "First integer.", [12, 18, 42, 84, 120, 96]), Param("b", "integer", "Second integer.", [16, 27, 56, 90, 64, 150])],
             ["What is the greatest common divisor of {a} and {b}?", "Find gcd({a}, {b})."]),
    Function("is_prime_number", "Check whether an integer is prime.", "math",
             [Param("n", "integer", "The integer to test.", [97, 221, 7919, 1001, 589, 8191])],
             ["Is {n} a prime number?", "Check if {n} is prime."]),
    Function("mean_of_values", "Arithmetic mean of a list of numbers.", "math",
             [Param("values", "array", "The numbers.", [[3, 5, 9], [10, 20, 30, 40], [2, 4, 4, 8], [7, 14]], items="integer")],
             ["What is the average of {values}?", "Compute the mean of the numbers {values}."]),
    Function("book_table", "Reserve a restaurant table.", "booking",
             [Param("restaurant", "string", "Restaurant name.", ["Casa Luna", "The Copper Pot", "Sakura House", "Le Petit Four"]),
              Param("guests", "integer", "Number of people.", _nums(2, 8)),
              Param("time", "string", "Time in HH:MM.", ["18:30", "19:00", "20:15", "21:00"])],
             ["Book a table for {guests} at {restaurant} at {time}.", "Reserve {restaurant} for {guests} people at {time}."]),
    Function("hotel_search", "Search hotels in a city for a number of nights.", "booking",
             [Param("city", "string", "The city.", CITIES), Param("nights", "integer", "Number of nights.", _nums(1, 6)),
              Param("max_price", "integer", "Highest price per night.", [80, 120, 150, 200], required=False)],
             ["Find me a hotel in {city} for {nights} nights.", "I need somewhere to stay in {city} for {nights} nights."],
             {"max_price": " Keep it under {max_price} per night."}),
    Function("flight_status", "Status of a flight by its number.", "travel",
             [Param("flight_number", "string", "Airline code and number.", ["LX318", "TP1042", "KQ101", "NH7", "AC870"])],
             ["Is flight {flight_number} on time?", "What's the status of flight {flight_number}?"]),
    Function("travel_distance", "Distance between two cities.", "travel",
             [Param("origin", "string", "Start city.", CITIES), Param("destination", "string", "End city.", CITIES),
              Param("unit", "string", "Unit of length.", UNITS_LEN, required=False)],
             ["How far is {origin} from {destination}?", "What is the distance between {origin} and {destination}?"],
             {"unit": " Answer in {unit}."}),
    Function("send_text_message", "Send a text message to a contact.", "communication",
             [Param("recipient", "string", "Contact name.", NAMES), Param("body", "string", "Message text.", ["running late", "call me back", "happy birthday", "meeting moved to 3pm"])],
             ["Text {recipient}: {body}.", "Send {recipient} a message saying '{body}'."]),
    Function("schedule_meeting", "Put a meeting with a contact in the calendar.", "communication",
             [Param("attendee", "string", "Who to meet.", NAMES), Param("date", "string", "Date as YYYY-MM-DD.", ["2026-03-04", "2026-05-17", "2026-08-21", "2026-11-30"]),
              Param("duration_minutes", "integer", "Length of the meeting.", [15, 30, 45, 60])],
             ["Schedule a {duration_minutes} minute meeting with {attendee} on {date}.", "Set up {duration_minutes} minutes with {attendee} on {date}."]),
    Function("grocery_price", "Price of a grocery item at the nearest store.", "shopping",
             [Param("item", "string", "The product.", ITEMS), Param("quantity", "integer", "How many units.", _nums(1, 5))],
             ["How much do {quantity} packs of {item} cost?", "Price check: {quantity} x {item}."]),
    Function("track_parcel", "Where a parcel is, by tracking code.", "shopping",
             [Param("tracking_code", "string", "The tracking code.", ["ZX90812", "PK55310", "QA77102", "MN24680"])],
             ["Where is my parcel {tracking_code}?", "Track the package with code {tracking_code}."]),
    Function("movie_suggestions", "Suggest films of a genre released after a year.", "media",
             [Param("genre", "string", "Film genre.", GENRES), Param("after_year", "integer", "Earliest release year.", [1990, 2005, 2012, 2020])],
             ["Suggest some {genre} films released after {after_year}.", "Any good {genre} movies from after {after_year}?"]),
    Function("podcast_search", "Find podcasts about a topic.", "media",
             [Param("topic", "string", "The topic.", TOPICS), Param("max_results", "integer", "How many to return.", [3, 5, 10], required=False)],
             ["Find podcasts about {topic}.", "Are there podcasts on {topic}?"],
             {"max_results": " Show {max_results} of them."}),
    Function("step_count", "Steps walked by a person on a date.", "health",
             [Param("person", "string", "Whose steps.", NAMES), Param("date", "string", "Date as YYYY-MM-DD.", ["2026-01-09", "2026-02-14", "2026-06-01"])],
             ["How many steps did {person} walk on {date}?", "Get {person}'s step count for {date}."]),
    Function("calorie_estimate", "Calories burned by an activity.", "health",
             [Param("activity", "string", "The activity.", ["cycling", "swimming", "rowing", "hiking"]), Param("minutes", "integer", "Duration in minutes.", [20, 30, 45, 90]),
              Param("vigorous", "boolean", "Whether the effort is vigorous.", [True, False], required=False)],
             ["How many calories does {minutes} minutes of {activity} burn?", "Estimate the calories for {activity} for {minutes} minutes."]),
]

# Requests no catalogue function can serve (irrelevance needs them too, besides other domains' requests).
UNSERVED = ["Write me a haiku about autumn.", "Who painted the ceiling of the Sistine Chapel?",
            "Tell me a joke about penguins.", "What is the capital of Mongolia?",
            "Summarise the plot of Hamlet in one sentence.", "Recommend a name for my new cat."]


def _phrase(value: Any) -> str:
    """How a value reads in a request: 40.0 as "40", lists as "3, 5 and 9"."""
    if isinstance(value, list):
        return ", ".join(map(_phrase, value[:-1])) + f" and {_phrase(value[-1])}" if len(value) > 1 else _phrase(value[0])
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _instance(fn: Function, rng: random.Random) -> tuple[str, dict[str, Any]]:
    """One request for `fn` and the arguments it implies."""
    args = {p.name: rng.choice(p.values) for p in fn.params if p.required}
    if fn.name == "travel_distance":
        args["destination"] = rng.choice([c for c in CITIES if c != args["origin"]])
    if fn.name == "fx_convert":
        args["target"] = rng.choice([c for c in CURRENCIES if c != args["source"]])
    text = rng.choice(fn.requests)
    for p in fn.params:
        if not p.required and rng.random() < 0.5:
            args[p.name] = rng.choice(p.values)
            if p.name == "vigorous":
                text += " The effort is vigorous." if args[p.name] else " It is an easy pace."
            else:
                text += fn.optional_phrases[p.name]
    fill = {k: _phrase(v) for k, v in args.items()}
    return text.format(**fill), args


def _possible(fn: Function, args: dict[str, Any]) -> dict[str, list[Any]]:
    return {p.name: [args[p.name]] if p.name in args else [""] for p in fn.params}


def _join(first: str, second: str) -> str:
    return f"{first} Also, {second[0].lower()}{second[1:]}"


def make_task(category: str, rng: random.Random) -> dict[str, Any]:
    """One synthetic task of a category (see the module docstring)."""
    fn = rng.choice(CATALOGUE)
    others = [f for f in CATALOGUE if f.name != fn.name]
    if category in ("simple", "multiple"):
        question, args = _instance(fn, rng)
        calls = [(fn, args)]
        offered = [fn] + (rng.sample(others, rng.randint(1, 3)) if category == "multiple" else [])
    elif category == "parallel":
        q1, a1 = _instance(fn, rng)
        q2, a2 = _instance(fn, rng)
        while a2 == a1:
            q2, a2 = _instance(fn, rng)
        question, calls, offered = _join(q1, q2), [(fn, a1), (fn, a2)], [fn]
    elif category == "parallel_multiple":
        fn2 = rng.choice(others)
        q1, a1 = _instance(fn, rng)
        q2, a2 = _instance(fn2, rng)
        question, calls = _join(q1, q2), [(fn, a1), (fn2, a2)]
        offered = [fn, fn2] + rng.sample([f for f in others if f.name != fn2.name], rng.randint(0, 1))
    elif category == "irrelevance":
        unrelated = [f for f in CATALOGUE if f.domain != fn.domain]
        same_domain = [f for f in CATALOGUE if f.domain == fn.domain]
        offered = rng.sample(same_domain, rng.randint(1, len(same_domain)))
        question = rng.choice(UNSERVED) if rng.random() < 0.3 else _instance(rng.choice(unrelated), rng)[0]
        calls = []
    else:
        raise ValueError(f"unknown category {category!r}")
    rng.shuffle(offered)
    return {
        "category": category,
        "messages": [{"role": "user", "content": question}],
        "question": question,
        "functions": [f.describe() for f in offered],
        "possible_answer": [{f.name: _possible(f, a)} for f, a in calls] or None,
        "gold_calls": [{"name": f.name, "arguments": a} for f, a in calls],
    }


def function_calling_tasks(n: int, seed: int, weights: dict[str, float] | None = None,
                           exclude: set[str] | None = None, prefix: str = "fc") -> list[dict[str, Any]]:
    """n distinct tasks (by question text and offered functions), categories drawn with `weights`."""
    weights = weights or CATEGORY_WEIGHTS
    rng = random.Random(seed)
    seen = set(exclude or ())
    tasks: list[dict[str, Any]] = []
    categories, probs = list(weights), list(weights.values())
    attempts = 0
    while len(tasks) < n:
        attempts += 1
        if attempts > 100 * n:
            raise ValueError(f"could only make {len(tasks)} distinct tasks of {n}")
        task = make_task(rng.choices(categories, probs)[0], rng)
        key = task["question"]
        if key in seen:
            continue
        seen.add(key)
        tasks.append({"id": f"{prefix}-{len(tasks):04d}", **task})
    return tasks


def demonstration(task: dict[str, Any]) -> list[dict[str, str]]:
    """The ideal single-turn answer as a conversation: the gold calls as `<tool_call>` blocks, or a plain
    refusal when no offered function fits."""
    if task["gold_calls"]:
        reply = "\n".join(format_tool_call(ToolCall(c["name"], c["arguments"])) for c in task["gold_calls"])
    else:
        reply = "None of the available functions can do that."
    return [*task["messages"], {"role": "assistant", "content": reply}]


HELDOUT_SIZE = 120
"""held-out tasks (`function_calling_splits`), all scored by lesson 05"""


def _first_splits() -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """The RL tasks, the retired first held-out set and the demonstrations' tasks, pairwise disjoint by request
    text. The retired set (120 tasks, seed 22) was scored by lesson 05's single-seed probes before validation
    splits existed, so it no longer measures anything; it is generated only to keep every later split disjoint
    from it, and its draw still decides which demonstrations exist."""
    train = function_calling_tasks(480, seed=21, prefix="fc-train")
    retired = function_calling_tasks(120, seed=22, exclude={t["question"] for t in train}, prefix="fc-heldout")
    seen = {t["question"] for t in train + retired}
    sft_tasks = function_calling_tasks(64, seed=23, exclude=seen,
                                       weights={"simple": .25, "multiple": .25, "parallel": .2,
                                                "parallel_multiple": .2, "irrelevance": .1},
                                       prefix="fc-sft")
    return train, retired, sft_tasks


def function_calling_splits() -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """Synthetic function-calling tasks (lesson 05): 480 for RL, `HELDOUT_SIZE` held out (drawn from a seed no
    earlier file used, disjoint from every other split and from the retired first held-out set), and 64 SFT
    demonstrations of every category (irrelevance included, but only a few). All are disjoint by request text.

    The demonstrations show every category because GRPO can only reinforce what the policy already samples:
    a cold start that never writes a second call gives parallel groups no spread in the number of calls
    (`docs/design/05_rl_for_tool_calls.md`)."""
    train, retired, sft_tasks = _first_splits()
    seen = {t["question"] for t in train + retired + sft_tasks + function_calling_validation()}
    heldout = function_calling_tasks(HELDOUT_SIZE, seed=25, exclude=seen, prefix="fc-test")
    demos = [{**t, "demonstration": demonstration(t)} for t in sft_tasks]
    return train, heldout, demos


def retired_heldout() -> list[dict[str, Any]]:
    """The first held-out set, retired (`_first_splits`): for tests that show no later split overlaps it."""
    return _first_splits()[1]


def function_calling_validation(n: int = 120) -> list[dict[str, Any]]:
    """Tasks for tuning (lesson 05): the categories of the RL tasks, disjoint from the RL tasks, the
    demonstrations and the retired held-out set (the new held-out set is drawn disjoint from these)."""
    train, retired, sft_tasks = _first_splits()
    seen = {t["question"] for t in train + retired + sft_tasks}
    return function_calling_tasks(n, seed=24, exclude=seen, prefix="fc-validation")


# --- the environment -------------------------------------------------------------------------------------


class SchemaToolbox(Toolbox):
    """Tools known only by their schemas: rendered into the prompt, parsed when called, never executed.

    A single-turn function-calling episode records the calls the policy wrote; what they would return does
    not matter for scoring, so every well-formed call is answered with "(not executed)" (a malformed one
    still gets its parse error, as in any `Toolbox`).
    """

    def __init__(self, functions: Sequence[dict[str, Any]]) -> None:
        self.functions = {}
        self.schemas = [tool_schema(f) for f in functions]

    def execute(self, call: ToolCall) -> str:
        return "(not executed)"


@dataclass
class FunctionCallEnv:
    """BFCL entries, or synthetic tasks in the same format, as an `Environment`: the request, the task's
    functions as tools (`SchemaToolbox`), one model turn, scored by BFCL's AST checker
    (`agentrl_lite.tasks.bfcl.check`)."""

    instructions: str = SYSTEM_PROMPT
    """the system prompt; the tool schemas are rendered after it by the chat template"""

    def prompt(self, task: dict[str, Any]) -> list[dict[str, str]]:
        return [{"role": "system", "content": self.instructions}, *task["messages"]]

    def toolbox_for(self, task: dict[str, Any]) -> SchemaToolbox:
        return SchemaToolbox(task["functions"])

    def score(self, task: dict[str, Any], episode: Episode) -> dict[str, Any]:
        """correct: the policy's reply passes the checker; error_type: the first rule it broke ("" if none)."""
        result = check_text(task, "".join(turn.content for turn in episode.model_turns))
        return {"correct": float(result.valid), "error_type": result.error_type,
                "tool_calls": float(episode.num_tool_calls)}
