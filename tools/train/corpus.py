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
"""
import argparse
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


def qa_pair(r):
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


def document(r):
    return dialogue(r) if r.random() < 0.35 else story(r)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--docs", type=int, default=1000)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    r = random.Random(a.seed)
    with open(a.out, "w", encoding="utf-8") as f:
        for _ in range(a.docs):
            # Documents are separated by a blank line; the trainer splits on it.
            f.write(document(r) + "\n\n")


if __name__ == "__main__":
    main()
