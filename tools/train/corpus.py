#!/usr/bin/env python3
"""The training corpus of kvserve's own model: simple English stories and short dialogues,
generated here from the project's own word lists and templates (so the text carries the
project's licence and nothing else).

Every document is either a story (a few paragraphs about a named character, a place, a find, a
problem and how it ends) or a ChatML dialogue in which a user asks about colours, animals,
opposites, counting, small sums, days and months, and an assistant answers. The generator is
seeded, so the same seed always writes the same text; the held-out split uses a different seed
and therefore different combinations of the same words.

    python3 tools/train/corpus.py --seed 1 --docs 40000 --out train.txt

--json and --tools mix in two more kinds of ChatML dialogue (a later phase of training, see
models/README.md): answers written as short JSON objects (with a system message that asks for
JSON or carries a JSON Schema, or a user who asks for it), and dialogues with tools rendered
exactly as kvserve's chatml template renders them (the Hermes format: <tools> JSON lines in the
system turn, <tool_call> blocks in the assistant turn, <tool_response> blocks in a user turn).
"""
import argparse
import json
import random

# (name, pronoun subject, object, possessive)
NAMES = [
    ("Lily", "she", "her", "her"), ("Tom", "he", "him", "his"), ("Mia", "she", "her", "her"),
    ("Ben", "he", "him", "his"), ("Anna", "she", "her", "her"), ("Sam", "he", "him", "his"),
    ("Lucy", "she", "her", "her"), ("Max", "he", "him", "his"), ("Emma", "she", "her", "her"),
    ("Leo", "he", "him", "his"), ("Sara", "she", "her", "her"), ("Jack", "he", "him", "his"),
    ("Zoe", "she", "her", "her"), ("Finn", "he", "him", "his"), ("Ella", "she", "her", "her"),
    ("Noah", "he", "him", "his"), ("Ruby", "she", "her", "her"), ("Owen", "he", "him", "his"),
    ("Nora", "she", "her", "her"), ("Eli", "he", "him", "his"), ("Ivy", "she", "her", "her"),
    ("Hugo", "he", "him", "his"), ("Rosa", "she", "her", "her"), ("Theo", "he", "him", "his"),
]
KINDS = ["girl", "boy", "rabbit", "fox", "bear", "cat", "dog", "mouse", "duck", "frog",
         "bird", "squirrel", "turtle", "owl", "lamb", "pig"]
ADJ_PERSON = ["little", "kind", "brave", "curious", "happy", "shy", "clever", "small",
              "friendly", "busy", "gentle", "funny"]
PLACES = [("a small house", "near the river"), ("a big farm", "at the edge of the woods"),
          ("a cozy nest", "high in an old tree"), ("a quiet village", "by the sea"),
          ("a little cottage", "on a green hill"), ("a busy town", "next to the park"),
          ("a warm burrow", "under a big rock"), ("a tall house", "at the end of the road")]
ACTIVITIES = ["play in the garden", "read books", "run in the grass", "sing songs",
              "look at the clouds", "pick flowers", "build with blocks", "draw pictures",
              "splash in the puddles", "watch the birds", "ride a red bike", "bake cookies"]
OBJECTS = [("ball", "red"), ("box", "wooden"), ("key", "golden"), ("kite", "blue"),
           ("hat", "yellow"), ("shell", "pink"), ("stone", "shiny"), ("book", "old"),
           ("feather", "white"), ("cup", "green"), ("map", "torn"), ("bell", "silver"),
           ("coat", "warm"), ("boat", "tiny"), ("lamp", "bright"), ("sock", "striped")]
FOUND_AT = ["under a tree", "in the tall grass", "behind the shed", "near the pond",
            "on the path", "by the old fence", "in the sand", "next to a big rock"]
PROBLEMS = [
    ("the {obj} was stuck in a tree", "climbed up slowly and got it down"),
    ("the {obj} fell into the pond", "used a long stick to pull it out"),
    ("a strong wind blew the {obj} away", "ran after it until it stopped by a bush"),
    ("the {obj} was too heavy to carry", "asked a friend to help carry it home"),
    ("the {obj} was broken", "fixed it with glue and a bit of string"),
    ("it started to rain on the {obj}", "hid it under a big leaf until the rain stopped"),
    ("a dog ran off with the {obj}", "gave the dog a treat and the dog let it go"),
    ("the {obj} was lost in the dark", "found it again with a small lamp"),
]
FEELINGS_GOOD = ["happy", "proud", "glad", "excited", "thankful"]
FEELINGS_BAD = ["sad", "worried", "upset", "scared"]
ENDINGS = [
    "From that day on, {name} and {friend} were the best of friends.",
    "That night, {name} went to bed with a big smile.",
    "{Subj} learned that it is good to ask for help.",
    "{Subj} learned that being patient makes hard things easy.",
    "{Subj} learned that sharing makes everyone happy.",
    "And every day after that, {name} took good care of the {obj}.",
    "Then {name} and {friend} went home for dinner, tired and happy.",
]
MOTHER = ["mom", "dad", "grandma", "grandpa"]

COLORS = {"sky": "blue", "grass": "green", "sun": "yellow", "snow": "white", "coal": "black",
          "banana": "yellow", "strawberry": "red", "orange": "orange", "leaf": "green",
          "cloud": "white", "tomato": "red", "lemon": "yellow", "carrot": "orange",
          "plum": "purple", "crow": "black", "frog": "green", "milk": "white",
          "chocolate": "brown", "cherry": "red", "pumpkin": "orange"}
SOUNDS = {"cow": "moo", "dog": "woof", "cat": "meow", "duck": "quack", "sheep": "baa",
          "pig": "oink", "owl": "hoot", "horse": "neigh", "lion": "roar", "frog": "ribbit",
          "bee": "buzz", "mouse": "squeak", "rooster": "cock-a-doodle-doo", "snake": "hiss"}
EATS = {"rabbit": "carrots and grass", "cow": "grass", "cat": "fish and meat",
        "bird": "seeds and worms", "bear": "berries, fish and honey", "mouse": "seeds and cheese",
        "monkey": "bananas and fruit", "horse": "hay and oats", "squirrel": "nuts and seeds",
        "panda": "bamboo", "dog": "meat and dog food", "duck": "plants and small bugs"}
OPPOSITES = {"hot": "cold", "big": "small", "up": "down", "fast": "slow", "day": "night",
             "happy": "sad", "open": "closed", "wet": "dry", "light": "dark", "old": "new",
             "tall": "short", "full": "empty", "loud": "quiet", "hard": "soft", "in": "out",
             "early": "late", "left": "right", "near": "far", "first": "last", "win": "lose"}
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December"]
NUMBER_WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine",
                "ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen",
                "seventeen", "eighteen", "nineteen", "twenty"]
LEGS = {"dog": 4, "cat": 4, "bird": 2, "spider": 8, "ant": 6, "cow": 4, "duck": 2, "fish": 0,
        "snake": 0, "horse": 4, "bee": 6, "chicken": 2}


def a_an(word):
    return ("an " if word[0] in "aeiou" else "a ") + word


def story(r):
    name, subj, obj_pron, poss = r.choice(NAMES)
    friend = r.choice([n for n in NAMES if n[0] != name])
    kind = r.choice(KINDS)
    if kind in ("girl", "boy"):
        kind = "girl" if subj == "she" else "boy"
    adj = r.choice(ADJ_PERSON)
    home, where = r.choice(PLACES)
    act1, act2 = r.sample(ACTIVITIES, 2)
    obj, color = r.choice(OBJECTS)
    found = r.choice(FOUND_AT)
    prob, fix = r.choice(PROBLEMS)
    Subj = subj.capitalize()
    opener = r.choice(["Once upon a time", "One sunny morning", "Long ago", "One day"])
    s = []
    if opener in ("Once upon a time", "Long ago"):
        s.append(f"{opener}, there was {a_an(adj)} {kind} named {name}.")
        s.append(f"{Subj} lived in {home} {where}.")
        s.append(f"Every day, {name} liked to {act1} and {act2}.")
        s.append(f"One day, {name} found {a_an(color)} {obj} {found}.")
    else:
        s.append(f"{opener}, {a_an(adj)} {kind} named {name} went outside to {act1}.")
        s.append(f"{name} lived in {home} {where}.")
        s.append(f"{Subj} saw {a_an(color)} {obj} {found} and picked it up.")
    s.append(r.choice([f"\"What a nice {obj}!\" said {name}.",
                       f"{name} was very {r.choice(FEELINGS_GOOD)}.",
                       f"{Subj} showed the {obj} to {poss} {r.choice(MOTHER)}."]))
    para1 = " ".join(s)
    s = []
    s.append(f"But then {prob.format(obj=obj)}.")
    s.append(f"{name} felt {r.choice(FEELINGS_BAD)}.")
    if r.random() < 0.5:
        s.append(f"{Subj} called {poss} friend {friend[0]}.")
        s.append(f"\"Can you help me?\" asked {name}. \"Yes, I can help you,\" said {friend[0]}.")
        s.append(f"Together they {fix}.")
    else:
        s.append(f"{Subj} thought for a moment. Then {subj} {fix}.")
        s.append(f"Soon {poss} friend {friend[0]} came to see what happened.")
    para2 = " ".join(s)
    s = [f"{name} felt {r.choice(FEELINGS_GOOD)} again.",
         r.choice(ENDINGS).format(name=name, friend=friend[0], Subj=Subj, obj=obj)]
    para3 = " ".join(s)
    return "\n".join([para1, para2, para3])


def qa_pair(r, t=None):
    if t is None:
        t = r.randrange(10)
    if t == 0:
        thing, color = r.choice(list(COLORS.items()))
        q = r.choice([f"What color is {'the ' if thing in ('sky', 'sun', 'grass', 'snow') else 'a '}{thing}?",
                      f"What color is {thing}?" if thing in ("grass", "snow", "milk", "coal", "chocolate") else f"Tell me the color of a {thing}."])
        article = "The" if thing in ("sky", "sun", "grass", "snow") else "A"
        if thing in ("milk", "coal", "chocolate"):
            return q, f"{thing.capitalize()} is {color}."
        return q, f"{article} {thing} is {color}."
    if t == 1:
        animal, sound = r.choice(list(SOUNDS.items()))
        q = r.choice([f"What sound does a {animal} make?", f"What does a {animal} say?"])
        return q, f"A {animal} says {sound}."
    if t == 2:
        animal, food = r.choice(list(EATS.items()))
        q = r.choice([f"What does a {animal} eat?", f"What do {animal}s like to eat?"])
        return q, f"A {animal} eats {food}."
    if t == 3:
        w, o = r.choice(list(OPPOSITES.items()))
        if r.random() < 0.5:
            w, o = o, w
        return f"What is the opposite of {w}?", f"The opposite of {w} is {o}."
    if t == 4:
        a, b = r.randrange(0, 11), r.randrange(0, 11)
        q = r.choice([f"What is {a} plus {b}?", f"What is {a} + {b}?", f"Can you add {a} and {b}?"])
        return q, f"{a} plus {b} is {a + b}."
    if t == 5:
        a = r.randrange(1, 21)
        b = r.randrange(0, a + 1)
        return r.choice([f"What is {a} minus {b}?", f"What is {a} - {b}?"]), f"{a} minus {b} is {a - b}."
    if t == 6:
        i = r.randrange(7)
        if r.random() < 0.5:
            return f"What day comes after {DAYS[i]}?", f"The day after {DAYS[i]} is {DAYS[(i + 1) % 7]}."
        return f"What day comes before {DAYS[i]}?", f"The day before {DAYS[i]} is {DAYS[(i - 1) % 7]}."
    if t == 7:
        i = r.randrange(12)
        return f"What month comes after {MONTHS[i]}?", f"The month after {MONTHS[i]} is {MONTHS[(i + 1) % 12]}."
    if t == 8:
        n = r.randrange(3, 11)
        start = r.randrange(1, 6)
        seq = ", ".join(str(k) for k in range(start, start + n))
        return f"Can you count from {start} to {start + n - 1}?", f"Sure: {seq}."
    animal, legs = r.choice(list(LEGS.items()))
    q = f"How many legs does a {animal} have?"
    if legs == 0:
        return q, f"A {animal} has no legs."
    return q, f"A {animal} has {NUMBER_WORDS[legs]} legs."


def turn(role, text):
    return f"<|im_start|>{role}\n{text}<|im_end|>\n"


def dialogue(r):
    out = []
    if r.random() < 0.3:
        out.append(turn("system", r.choice(["You are a helpful assistant.",
                                            "You are a friendly teacher for children.",
                                            "Answer in short sentences."])))
    if r.random() < 0.4:
        hello = r.choice(["Hello!", "Hi!", "Good morning!", "Hi there."])
        out.append(turn("user", hello))
        out.append(turn("assistant", r.choice(["Hello! How can I help you today?",
                                               "Hi! What would you like to know?",
                                               "Good morning! Ask me anything."])))
    for _ in range(r.randrange(1, 4)):
        if r.random() < 0.15:
            q = "Can you tell me a short story?"
            a = story(r).replace("\n", " ")
        else:
            q, a = qa_pair(r)
        out.append(turn("user", q))
        out.append(turn("assistant", a))
    if r.random() < 0.3:
        out.append(turn("user", r.choice(["Thank you!", "Thanks.", "Thank you very much."])))
        out.append(turn("assistant", r.choice(["You are welcome!", "Happy to help!",
                                               "You are welcome. Have a nice day!"])))
    return "".join(out).rstrip("\n")


# --- Dialogues answered in JSON -------------------------------------------------------------
# Short objects about the same small world: strings of a few words (so a string closes soon),
# integers, booleans, arrays, nested objects and null, under keys drawn from several names each.


def jdumps(value):
    """JSON as Python's json.dumps writes it (", " and ": "), which is also how kvserve renders
    tools and how its chatml template prints a call's name."""
    return json.dumps(value, ensure_ascii=False)


def compact(value):
    """Compact JSON (no whitespace), as kvserve's structured output writes it by default: JSON
    answers and a call's arguments are mostly this."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _pick(r, *names):
    return r.choice(names)


def _json_fact(r):
    """(question, [(key, value), ...]): one fact of the corpus's world as JSON fields."""
    t = r.randrange(16)
    if t == 0:
        thing, color = r.choice(list(COLORS.items()))
        q = r.choice([f"What color is {a_an(thing) if thing not in ('sky', 'sun', 'grass', 'snow') else 'the ' + thing}?",
                      f"Tell me the color of {'the ' if thing in ('sky', 'sun', 'grass', 'snow') else 'a '}{thing}."])
        f = [(_pick(r, "color", "colour", "answer", "result"), color)]
        if r.random() < 0.5:
            f.insert(0, (_pick(r, "thing", "item", "object"), thing))
        return q, f
    if t == 1:
        thing, color = r.choice(list(COLORS.items()))
        asked = color if r.random() < 0.5 else r.choice([c for c in set(COLORS.values()) if c != color])
        q = f"Is {'the ' if thing in ('sky', 'sun', 'grass', 'snow') else 'a '}{thing} {asked}?"
        f = [(_pick(r, "answer", "is_" + asked, "correct", "yes"), asked == color)]
        if r.random() < 0.5:
            f.append((_pick(r, "color", "colour", "real_color"), color))
        return q, f
    if t == 2:
        animal, sound = r.choice(list(SOUNDS.items()))
        q = r.choice([f"What sound does a {animal} make?", f"What does a {animal} say?"])
        f = [(_pick(r, "sound", "says", "noise", "answer"), sound)]
        if r.random() < 0.5:
            f.insert(0, (_pick(r, "animal", "name", "creature"), animal))
        if r.random() < 0.3:
            return q, [(_pick(r, "animal", "result"), dict(f))]
        return q, f
    if t == 3:
        animal, food = r.choice(list(EATS.items()))
        q = r.choice([f"What does a {animal} eat?", f"What do {animal}s like to eat?"])
        foods = food.replace(" and ", ", ").split(", ")
        value = foods if r.random() < 0.6 else food
        f = [(_pick(r, "food", "foods", "eats", "diet"), value)]
        if r.random() < 0.5:
            f.insert(0, (_pick(r, "animal", "name"), animal))
        return q, f
    if t == 4:
        w, o = r.choice(list(OPPOSITES.items()))
        if r.random() < 0.5:
            w, o = o, w
        f = [(_pick(r, "opposite", "answer", "antonym", "result"), o)]
        if r.random() < 0.5:
            f.insert(0, (_pick(r, "word", "input"), w))
        return f"What is the opposite of {w}?", f
    if t == 5:
        a, b = r.randrange(0, 11), r.randrange(0, 11)
        q = r.choice([f"What is {a} plus {b}?", f"What is {a} + {b}?", f"Can you add {a} and {b}?"])
        f = [(_pick(r, "sum", "total", "answer", "result"), a + b)]
        if r.random() < 0.4:
            f = [(_pick(r, "a", "x", "first"), a), (_pick(r, "b", "y", "second"), b)] + f
        return q, f
    if t == 6:
        a = r.randrange(1, 21)
        b = r.randrange(0, a + 1)
        q = r.choice([f"What is {a} minus {b}?", f"What is {a} - {b}?"])
        f = [(_pick(r, "difference", "answer", "result", "value"), a - b)]
        if r.random() < 0.3:
            f = [(_pick(r, "question", "problem"), {"a": a, "b": b})] + f
        return q, f
    if t == 7:
        i = r.randrange(7)
        after = r.random() < 0.5
        q = f"What day comes {'after' if after else 'before'} {DAYS[i]}?"
        day = DAYS[(i + 1) % 7] if after else DAYS[(i - 1) % 7]
        f = [(_pick(r, "day", "answer", "next_day" if after else "previous_day"), day)]
        if r.random() < 0.3:
            f.append((_pick(r, "weekend", "is_weekend"), day in ("Saturday", "Sunday")))
        return q, f
    if t == 8:
        i = r.randrange(12)
        q = f"What month comes after {MONTHS[i]}?"
        f = [(_pick(r, "month", "answer", "next_month"), MONTHS[(i + 1) % 12])]
        if r.random() < 0.3:
            f.append((_pick(r, "number", "month_number"), (i + 1) % 12 + 1))
        return q, f
    if t == 9:
        n = r.randrange(3, 9)
        start = r.randrange(1, 6)
        q = f"Can you count from {start} to {start + n - 1}?"
        f = [(_pick(r, "numbers", "count", "sequence", "items"), list(range(start, start + n)))]
        if r.random() < 0.3:
            f = [(_pick(r, "from", "start"), start), (_pick(r, "to", "end"), start + n - 1)] + f
        return q, f
    if t == 10:
        animal, legs = r.choice(list(LEGS.items()))
        q = r.choice([f"How many legs does a {animal} have?", f"Does a {animal} have legs?"])
        f = [(_pick(r, "legs", "number_of_legs", "count", "answer"), legs)]
        if q.startswith("Does") or r.random() < 0.3:
            f.append((_pick(r, "has_legs", "walks"), legs > 0))
        if r.random() < 0.4:
            f.insert(0, (_pick(r, "animal", "name"), animal))
        return q, f
    if t == 11:
        # A character for a story: the widest object, with null for what is not known.
        name, subj, _, _ = r.choice(NAMES)
        kind = r.choice(KINDS)
        if kind in ("girl", "boy"):
            kind = "girl" if subj == "she" else "boy"
        q = r.choice(["Make up a character for a story.", "Describe a story character.",
                      f"Tell me about a {kind} in a story.", "Give me a character for my story."])
        home, where = r.choice(PLACES)
        pool = [(_pick(r, "name", "first_name"), name), (_pick(r, "kind", "animal", "type"), kind),
                (_pick(r, "age", "years"), r.randrange(2, 12)),
                (_pick(r, "home", "lives_in", "place"), home),
                (_pick(r, "likes", "hobby", "favorite"), r.choice(ACTIVITIES)),
                (_pick(r, "friends", "best_friends"),
                 r.sample([n[0] for n in NAMES if n[0] != name], r.randrange(0, 4))),
                (_pick(r, "brave", "is_kind", "happy", "shy"), r.random() < 0.6),
                (_pick(r, "pet", "nickname", "middle_name"), None),
                (_pick(r, "color", "favorite_color"), r.choice(sorted(set(COLORS.values()))))]
        f = pool[:2] + r.sample(pool[2:], r.randrange(1, 5))
        if r.random() < 0.3:
            return q, [(_pick(r, "character", "hero"), dict(f))]
        return q, f
    if t == 12:
        what = r.randrange(4)
        if what == 0:
            n = r.randrange(2, 5)
            return f"Name {NUMBER_WORDS[n]} colors.", [(_pick(r, "colors", "colours", "items"),
                                                        r.sample(sorted(set(COLORS.values())), n))]
        if what == 1:
            n = r.randrange(2, 5)
            return f"Name {NUMBER_WORDS[n]} animals.", [(_pick(r, "animals", "items", "names"),
                                                         r.sample(sorted(SOUNDS), n))]
        if what == 2:
            return "Which days are the weekend?", [(_pick(r, "days", "weekend"), ["Saturday", "Sunday"])]
        n = r.randrange(2, 5)
        return f"Name {NUMBER_WORDS[n]} fruits.", [(_pick(r, "fruits", "items", "food"), r.sample(
            ["banana", "strawberry", "orange", "lemon", "plum", "cherry", "tomato"], n))]
    if t == 13:
        # A question the world has no answer for: null.
        thing = r.choice(["the wind", "a song", "a secret", "the number seven", "a dream"])
        q = r.choice([f"What color is {thing}?", f"How heavy is {thing}?"])
        k = "color" if "color" in q else "weight"
        f = [(_pick(r, k, "answer", "value"), None)]
        if r.random() < 0.6:
            f.append((_pick(r, "known", "has_answer"), False))
        return q, f
    if t == 14:
        name = r.choice(NAMES)[0]
        obj, color = r.choice(OBJECTS)
        found = r.choice(FOUND_AT)
        q = f"{name} found {a_an(color)} {obj} {found}. What did {name} find?"
        f = [(_pick(r, "object", "thing", "found"), obj), (_pick(r, "color", "looks"), color)]
        if r.random() < 0.5:
            f.append((_pick(r, "where", "place"), found))
        if r.random() < 0.3:
            f = [(_pick(r, "who", "name"), name)] + f
        return q, f
    # A short message or title: a free string of a few words.
    topic = r.choice(["a cat", "a rainy day", "a red kite", "a birthday", "the sea", "a picnic",
                      "a lost key", "a brave fox", "winter", "a little boat"])
    key, value = r.choice([
        ("title", f"{r.choice(['The', 'A Day with', 'Finding'])} {topic.split(' ', 1)[-1].title()}"),
        ("message", r.choice(["See you soon!", "Have a nice day!", "Happy birthday!",
                              "Thank you for the help."])),
        ("summary", f"A story about {topic}."),
        ("greeting", r.choice(["Hello!", "Good morning!", "Hi there."]))])
    q = {"title": f"Give me a title for a story about {topic}.",
         "message": "Write a short message for a friend.",
         "summary": f"Sum up a story about {topic} in a few words.",
         "greeting": "Say hello."}[key]
    f = [(_pick(r, key, "text", "answer"), value)]
    if key == "title" and r.random() < 0.5:
        f.append((_pick(r, "words", "length"), len(value.split())))
    return q, f


def _unique(fields):
    """A JSON object from (key, value) pairs, keeping the first of repeated keys."""
    out = {}
    for k, v in fields:
        out.setdefault(k, v)
    return out


def json_schema_of(value):
    if isinstance(value, bool):
        return {"type": "boolean"}
    if isinstance(value, int):
        return {"type": "integer"}
    if isinstance(value, str):
        return {"type": "string"}
    if value is None:
        return {"type": "null"}
    if isinstance(value, list):
        return {"type": "array", "items": json_schema_of(value[0]) if value else {"type": "string"}}
    return {"type": "object", "properties": {k: json_schema_of(v) for k, v in value.items()},
            "required": list(value)}


JSON_SYSTEMS = ["Answer in JSON.", "You answer with a JSON object.", "Reply only with JSON.",
                "You are a helpful assistant. Answer in JSON.",
                "You are a helpful assistant that answers with JSON objects.",
                "Write every answer as one JSON object."]
JSON_ASKS = [" Answer in JSON.", " Reply in JSON.", " Give the answer as JSON.",
             " Answer with a JSON object."]


def json_dialogue(r):
    out = []
    n = r.randrange(1, 3)
    facts = [_json_fact(r) for _ in range(n)]
    objs = [_unique(f) for _, f in facts]
    how = r.random()
    if how < 0.3 or (how < 0.55 and n > 1):
        out.append(turn("system", r.choice(JSON_SYSTEMS)))
    elif how < 0.55:
        schema = jdumps(json_schema_of(objs[0]))
        out.append(turn("system", r.choice([
            f"Answer in JSON that matches this schema: {schema}",
            f"Reply with JSON. Schema: {schema}",
            f"You are a helpful assistant. Your answer must follow this JSON schema:\n{schema}"])))
    for i, ((q, _), obj) in enumerate(zip(facts, objs)):
        if how >= 0.55 and (i == 0 or r.random() < 0.5):
            # Asked by the user in the question. Never unasked: a plain question keeps its plain
            # answer (a server's json_schema constraint starts a JSON answer by itself).
            q += r.choice(JSON_ASKS)
        out.append(turn("user", q))
        out.append(turn("assistant", compact(obj) if r.random() < 0.85 else jdumps(obj)))
    return "".join(out).rstrip("\n")


# --- Dialogues with tools -------------------------------------------------------------------
# Rendered byte for byte as kvserve's chatml template (the Hermes tool format of Qwen2.5 and
# Qwen3) renders a request's `tools`, an assistant message's `tool_calls` and `tool` messages,
# so the model sees in training what a server prompt holds.

HERMES_TOOLS_HEAD = ("# Tools\n\nYou may call one or more functions to assist with the user "
                     "query.\n\nYou are provided with function signatures within <tools></tools> "
                     "XML tags:\n<tools>")
HERMES_TOOLS_TAIL = ("\n</tools>\n\nFor each function call, return a json object with function "
                     "name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
                     "{\"name\": <function-name>, \"arguments\": <args-json-object>}\n"
                     "</tool_call><|im_end|>\n")


def hermes_system(system, tools):
    head = "<|im_start|>system\n" + (system + "\n\n" if system else "") + HERMES_TOOLS_HEAD
    return head + "".join("\n" + jdumps(t) for t in tools) + HERMES_TOOLS_TAIL


def hermes_calls(content, calls):
    """An assistant turn with calls; the arguments compact, as a constrained call writes them
    (and a client sends them back)."""
    out = "<|im_start|>assistant\n" + content
    for i, (name, args) in enumerate(calls):
        if i > 0 or content:
            out += "\n"
        out += "<tool_call>\n{\"name\": \"" + name + "\", \"arguments\": " + compact(args) + "}\n</tool_call>"
    return out + "<|im_end|>\n"


def hermes_results(contents):
    return ("<|im_start|>user" + "".join(f"\n<tool_response>\n{c}\n</tool_response>" for c in contents)
            + "<|im_end|>\n")


def _tool(r, names, desc, params, required=None):
    """A request's tool: {"type": "function", "function": {...}} with one of several names and
    the parameters [(name, schema, description), ...] (descriptions sometimes left out)."""
    props = {}
    for p, schema, pdesc in params:
        props[p] = dict(schema, description=pdesc) if r.random() < 0.5 else dict(schema)
    fn = {"name": r.choice(names)}
    if r.random() < 0.8:
        fn["description"] = desc
    fn["parameters"] = {"type": "object", "properties": props}
    if params:
        fn["parameters"]["required"] = [p for p, _, _ in params] if required is None else required
    return {"type": "function", "function": fn}


def _result(r, obj, text):
    """A tool's reply: mostly JSON, sometimes plain text."""
    return jdumps(obj) if r.random() < 0.8 else text


PLACE_NAMES = ["Sandy Bay", "Green Hill", "Oak Village", "River Town", "Maple Farm", "Fox Wood",
               "Stone Bridge", "Bell Harbor"]
WEATHER = ["sunny", "rainy", "windy", "cloudy", "snowy", "foggy"]
SONGS = ["Happy Day", "The Little Boat", "Rain on the Roof", "Sunny Morning", "Ten Green Frogs",
         "The Moon Song"]
ROOMS = ["kitchen", "bedroom", "garden", "hall", "bathroom"]
TOPICS = ["foxes", "the sea", "trains", "birds", "space", "dragons", "cats", "the moon"]
ITEMS = ["apples", "eggs", "bread", "milk", "carrots", "cookies", "bananas", "cheese"]
MESSAGES = ["Dinner is ready.", "I will be late.", "See you at the park.", "Happy birthday!",
            "Please call me.", "The cake is in the oven."]


def _color_of(thing):
    return ("the " if thing in ("sky", "sun", "grass", "snow") else "a ") + thing


def tool_color(r):
    p = r.choice(["thing", "item", "object"])
    spec = _tool(r, ["get_color", "color_of", "lookup_color", "getColor"],
                 "Get the color of a thing.", [(p, {"type": "string"}, "The thing to look at.")])

    def call(r):
        thing, color = r.choice(list(COLORS.items()))
        q = r.choice([f"What color is {_color_of(thing)}?", f"Tell me the color of {_color_of(thing)}."])
        return (q, {p: thing}, _result(r, {"color": color}, color),
                f"{_color_of(thing).capitalize()} is {color}.")
    return spec, call, {0}


def tool_sound(r):
    p = r.choice(["animal", "name"])
    spec = _tool(r, ["animal_sound", "get_sound", "getAnimalSound"], "Get the sound an animal makes.",
                 [(p, {"type": "string"}, "The animal.")])

    def call(r):
        animal, sound = r.choice(list(SOUNDS.items()))
        q = r.choice([f"What sound does a {animal} make?", f"What does a {animal} say?"])
        return q, {p: animal}, _result(r, {"sound": sound}, sound), f"A {animal} says {sound}."
    return spec, call, {1}


def tool_arith(r, minus):
    a_name, b_name = r.choice([("a", "b"), ("x", "y"), ("first", "second")])
    names = (["subtract", "minus", "take_away", "calc_subtract"] if minus
             else ["add", "add_numbers", "sum", "calc_add"])
    desc = "Subtract b from a." if minus else "Add two numbers."
    if (a_name, b_name) != ("a", "b"):
        desc = f"Subtract {b_name} from {a_name}." if minus else desc
    spec = _tool(r, names, desc, [(a_name, {"type": "integer"}, "The first number."),
                                  (b_name, {"type": "integer"}, "The second number.")])

    def call(r):
        if minus:
            a = r.randrange(1, 21)
            b = r.randrange(0, a + 1)
            c = a - b
            q = r.choice([f"What is {a} minus {b}?", f"What is {a} - {b}?"])
            ans = f"{a} minus {b} is {c}."
        else:
            a, b = r.randrange(0, 11), r.randrange(0, 11)
            c = a + b
            q = r.choice([f"What is {a} plus {b}?", f"What is {a} + {b}?", f"Can you add {a} and {b}?"])
            ans = f"{a} plus {b} is {c}."
        return q, {a_name: a, b_name: b}, _result(r, {"result": c}, str(c)), ans
    return spec, call, {5 if minus else 4}


def tool_weather(r):
    with_day = r.random() < 0.5
    params = [("place", {"type": "string"}, "A town or a village.")]
    if with_day:
        params.append(("day", {"type": "string", "enum": DAYS}, "The day of the week."))
    spec = _tool(r, ["get_weather", "weather", "get_forecast", "getWeather"],
                 "Get the weather for a place.", params, required=["place"])

    def call(r):
        place = r.choice(PLACE_NAMES)
        w, deg = r.choice(WEATHER), r.randrange(-5, 31)
        args = {"place": place}
        if with_day and r.random() < 0.6:
            day = r.choice(DAYS)
            args["day"] = day
            q = r.choice([f"What will the weather be in {place} on {day}?",
                          f"Will it rain in {place} on {day}?"])
            ans = f"On {day} it will be {w} in {place}, {deg} degrees."
        else:
            q = r.choice([f"What is the weather in {place}?", f"Is it sunny in {place} today?",
                          f"How warm is it in {place}?"])
            ans = f"It is {w} in {place} and {deg} degrees."
        return q, args, _result(r, {"weather": w, "temperature": deg}, f"{w}, {deg} degrees"), ans
    return spec, call, set()


def tool_legs(r):
    p = r.choice(["animal", "name"])
    spec = _tool(r, ["count_legs", "get_legs", "legs_of"], "How many legs an animal has.",
                 [(p, {"type": "string"}, "The animal.")])

    def call(r):
        animal, legs = r.choice(list(LEGS.items()))
        ans = f"A {animal} has no legs." if legs == 0 else f"A {animal} has {NUMBER_WORDS[legs]} legs."
        return (f"How many legs does a {animal} have?", {p: animal},
                _result(r, {"legs": legs}, str(legs)), ans)
    return spec, call, {9}


def tool_day(r):
    spec = _tool(r, ["next_day", "day_after", "get_next_day"], "The day after a day of the week.",
                 [("day", {"type": "string", "enum": DAYS}, "A day of the week.")])

    def call(r):
        i = r.randrange(7)
        nxt = DAYS[(i + 1) % 7]
        return (f"What day comes after {DAYS[i]}?", {"day": DAYS[i]},
                _result(r, {"day": nxt}, nxt), f"The day after {DAYS[i]} is {nxt}.")
    return spec, call, {6}


def tool_timer(r):
    spec = _tool(r, ["set_timer", "start_timer", "timer"], "Start a kitchen timer.",
                 [("minutes", {"type": "integer"}, "How long, in minutes."),
                  ("label", {"type": "string"}, "What the timer is for.")], required=["minutes"])

    def call(r):
        n = r.randrange(1, 31)
        args = {"minutes": n}
        if r.random() < 0.5:
            label = r.choice(["cookies", "the cake", "tea", "homework", "a nap", "the eggs"])
            args["label"] = label
            q = f"Set a timer for {n} minutes for {label}."
        else:
            q = r.choice([f"Set a timer for {n} minutes.", f"Start a {n} minute timer, please."])
        return q, args, _result(r, {"ok": True}, "done"), f"Your timer for {n} minutes is set."
    return spec, call, set()


def tool_message(r):
    to = r.choice(["to", "friend", "name"])
    spec = _tool(r, ["send_message", "send_note", "message_friend"], "Send a short message.",
                 [(to, {"type": "string"}, "Who gets the message."),
                  ("text", {"type": "string"}, "The message.")])

    def call(r):
        name = r.choice(NAMES)[0]
        text = r.choice(MESSAGES)
        q = r.choice([f"Tell {name}: {text}", f"Send {name} a message: {text}",
                      f"Please write to {name} that {text[0].lower() + text[1:]}"])
        return (q, {to: name, "text": text}, _result(r, {"sent": True}, "sent"),
                f"I sent your message to {name}.")
    return spec, call, set()


def tool_light(r):
    spec = _tool(r, ["set_light", "switch_light", "turn_on_light"], "Turn a light on or off.",
                 [("room", {"type": "string", "enum": ROOMS}, "The room."),
                  ("on", {"type": "boolean"}, "true to turn it on, false to turn it off.")])

    def call(r):
        room, on = r.choice(ROOMS), r.random() < 0.6
        q = r.choice([f"Turn {'on' if on else 'off'} the light in the {room}.",
                      f"Can you switch {'on' if on else 'off'} the {room} light?"])
        return (q, {"room": room, "on": on}, _result(r, {"ok": True, "room": room}, "ok"),
                f"The {room} light is {'on' if on else 'off'} now.")
    return spec, call, set()


def tool_song(r):
    spec = _tool(r, ["play_song", "play_music", "playSong"], "Play a song.",
                 [("title", {"type": "string"}, "The song's title."),
                  ("loud", {"type": "boolean"}, "Play it loud.")], required=["title"])

    def call(r):
        title = r.choice(SONGS)
        args = {"title": title}
        q = f"Play {title}."
        if r.random() < 0.4:
            loud = r.random() < 0.5
            args["loud"] = loud
            q = f"Play {title} {'loud' if loud else 'quietly'}."
        return q, args, _result(r, {"playing": True}, "playing"), f"Now playing {title}."
    return spec, call, set()


def tool_books(r):
    spec = _tool(r, ["find_books", "search_books", "book_search"], "Find books about a topic.",
                 [("topic", {"type": "string"}, "What the books are about."),
                  ("max_results", {"type": "integer"}, "How many books at most.")],
                 required=["topic"])

    def call(r):
        topic = r.choice(TOPICS)
        n = r.randrange(1, 4)
        args = {"topic": topic}
        if r.random() < 0.6:
            args["max_results"] = n
            q = f"Find me {NUMBER_WORDS[n]} {'book' if n == 1 else 'books'} about {topic}."
        else:
            q = f"Are there any books about {topic}?"
        titles = r.sample([f"The {a} {b}" for a in ("Little", "Brave", "Lost", "Happy")
                           for b in ("Fox", "Boat", "Star", "Garden", "Kite")], n)
        ans = "I found " + (titles[0] if n == 1 else ", ".join(titles[:-1]) + " and " + titles[-1]) + "."
        return q, args, _result(r, {"books": titles}, ", ".join(titles)), ans
    return spec, call, set()


def tool_list(r):
    spec = _tool(r, ["add_to_list", "add_item", "list_add"], "Add an item to a list.",
                 [("item", {"type": "string"}, "The item."),
                  ("list", {"type": "string", "enum": ["shopping", "todo"]}, "Which list."),
                  ("count", {"type": "integer"}, "How many.")], required=["item", "list"])

    def call(r):
        item, n = r.choice(ITEMS), r.randrange(1, 7)
        args = {"item": item, "list": "shopping"}
        if r.random() < 0.5:
            args["count"] = n
            q = f"Put {NUMBER_WORDS[n]} {item} on my shopping list."
            ans = f"I added {NUMBER_WORDS[n]} {item} to your shopping list."
        else:
            q = f"Add {item} to my shopping list."
            ans = f"I added {item} to your shopping list."
        return q, args, _result(r, {"ok": True, "items": r.randrange(1, 9)}, "added"), ans
    return spec, call, set()


def tool_time(r):
    spec = _tool(r, ["get_time", "current_time", "what_time"], "Get the time now.", [])

    def call(r):
        t = f"{r.randrange(1, 13)}:{r.choice(['00', '15', '30', '45'])}"
        return (r.choice(["What time is it?", "Can you tell me the time?"]), {},
                _result(r, {"time": t}, t), f"It is {t}.")
    return spec, call, set()


TOOL_KINDS = [tool_color, tool_sound, lambda r: tool_arith(r, False), lambda r: tool_arith(r, True),
              tool_weather, tool_legs, tool_day, tool_timer, tool_message, tool_light, tool_song,
              tool_books, tool_list, tool_time]


def tool_dialogue(r):
    kinds = r.sample(TOOL_KINDS, r.choice([1, 1, 1, 2, 2, 3]))
    tools = [k(r) for k in kinds]
    system = r.choice([None, None, "You are a helpful assistant.",
                       "You are a friendly assistant for children.", "Answer in short sentences."])
    out = [hermes_system(system, [spec for spec, _, _ in tools])]
    covered = set().union(*(c for _, _, c in tools))
    for round_ in range(1 if r.random() < 0.85 else 2):
        if r.random() < 0.75:
            # One call, or two at once; then the tool replies and the assistant answers.
            picks = [r.choice(tools)] + ([r.choice(tools)] if r.random() < 0.15 else [])
            turns = [(spec["function"]["name"],) + call(r) for spec, call, _ in picks]
            question = " ".join(q for _, q, _, _, _ in turns)
            out.append(turn("user", question))
            lead = r.choice(["Let me check.", "I will look that up.", "One moment."]) if r.random() < 0.1 else ""
            out.append(hermes_calls(lead, [(name, args) for name, _, args, _, _ in turns]))
            out.append(hermes_results([res for _, _, _, res, _ in turns]))
            out.append(turn("assistant", " ".join(ans for _, _, _, _, ans in turns)))
        else:
            # Nothing to call for: a greeting, or a question that no offered tool answers.
            if r.random() < 0.3:
                q, a = r.choice([("Hello!", "Hello! How can I help you today?"),
                                 ("Hi!", "Hi! What would you like to know?"),
                                 ("What can you do?", "I can answer questions and use my tools for you."),
                                 ("Thank you!", "You are welcome!")])
            else:
                t = r.choice([t for t in range(10) if t not in covered])
                q, a = qa_pair(r, t)
            out.append(turn("user", q))
            out.append(turn("assistant", a))
    return "".join(out).rstrip("\n")


def document(r, json_share=0.0, tools_share=0.0):
    if json_share or tools_share:
        # Drawn only when asked for, so the story-and-dialogue corpus stays what it was.
        u = r.random()
        if u < json_share:
            return json_dialogue(r)
        if u < json_share + tools_share:
            return tool_dialogue(r)
    return dialogue(r) if r.random() < 0.35 else story(r)


def documents(text):
    """The documents of a corpus file. They are separated by a blank line, but a tool dialogue's
    system turn has blank lines of its own: a chat document ends with <|im_end|>, so a piece
    after a chat piece that does not is still the same document."""
    out = []
    for piece in text.split("\n\n"):
        if out and out[-1].startswith("<|im_start|>") and not out[-1].endswith("<|im_end|>"):
            out[-1] += "\n\n" + piece
        elif piece.strip():
            out.append(piece)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--docs", type=int, default=1000)
    ap.add_argument("--json", type=float, default=0.0,
                    help="share of documents that are dialogues answered in JSON")
    ap.add_argument("--tools", type=float, default=0.0,
                    help="share of documents that are dialogues with tools")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    r = random.Random(a.seed)
    with open(a.out, "w", encoding="utf-8") as f:
        for _ in range(a.docs):
            # Documents are separated by a blank line (see documents()).
            f.write(document(r, a.json, a.tools) + "\n\n")


if __name__ == "__main__":
    main()
