"""Guess My City (LMRL-Gym, ArCHer App. A): find the hidden city in at most 20 free-form questions.

The secret is one of 100 well-known cities on every inhabited continent. The oracle here is a
knowledge base (``KB``) with one-sentence answer templates, so the game needs no model; an LLM
oracle can be plugged in through ``llm_prompt`` / ``llm_postprocess``
(``envs.make(..., oracle="hf:...")``).

Rules of the oracle (``answer``), in order:
1. a question naming the secret city (or a variant: "Bombay", "Sao Paulo") as whole words wins:
   ``WIN_REPLY``, which never contains the name;
2. a question naming another city of ``TARGETS`` gets "No, I am not from <that city>." (as in the
   paper's sample dialogue);
3. questions about the name itself (spell it, its letters, backwards, "what city are you from?") get
   ``CANNOT``; everything else is parsed into an intent (language, continent, country, region,
   hemisphere, coast/sea, river, capital, population, climate, landmarks, food, sport, known-for)
   and answered from the KB, yes/no questions with "Yes, ..."/"No, ..." sentences;
4. anti-reward-hacking (ArCHer App. A): an answer that would contain the secret's name or a variant
   as whole words is replaced by exactly ``CANNOT`` ("What is the capital of your country?" for a
   capital);
5. anything the parser cannot map gets ``FALLBACK``.
All matching is on whole words, case- and accent-insensitive (``envs.core.normalize``): "climate"
does not mention "Lima" (the reference implementation's substring bug).

Deliberate choices: population bands are rough metropolitan-area figures; the climate is one
simplified Koppen-style label per city; "capital" means the national capital (Amsterdam, Cape Town
as the legislative capital, and Jakarta, still the capital in practice, count; Istanbul counts as
Europe). Like the reference game, a question that names the secret wins -- but only if it names no
other city (listing several cities in one question is a reward hack a policy finds quickly).
"""

from __future__ import annotations

import random
import re

from .core import QuestionGame, mentions, normalize

WIN_REPLY = "Yes, you guessed it! That is my city."
CANNOT = "I cannot answer that question."
FALLBACK = "I am not sure how to answer that."

# population bands (rough metropolitan-area population)
U1, M1_5, M5_10, O10 = "under 1 million", "1 to 5 million", "5 to 10 million", "over 10 million"
_BAND_RANGE = {U1: (0.0, 1.0), M1_5: (1.0, 5.0), M5_10: (5.0, 10.0), O10: (10.0, float("inf"))}

# climates (simplified Koppen groups)
TROP, ARID, MED, HSUB = "tropical", "arid", "mediterranean", "humid subtropical"
OCEAN, CONT, SUBARC, HIGH = (
    "temperate oceanic",
    "humid continental",
    "subarctic",
    "subtropical highland",
)
CLIMATES = (TROP, ARID, MED, HSUB, OCEAN, CONT, SUBARC, HIGH)

FOOTBALL = "football (soccer)"

# country -> sub-continental region (the "region" field of every city)
_COUNTRY_REGION = {
    "the United Kingdom": "Western Europe",
    "France": "Western Europe",
    "the Netherlands": "Western Europe",
    "Ireland": "Western Europe",
    "Belgium": "Western Europe",
    "Germany": "Central Europe",
    "Austria": "Central Europe",
    "the Czech Republic": "Central Europe",
    "Poland": "Central Europe",
    "Hungary": "Central Europe",
    "Spain": "Southern Europe",
    "Portugal": "Southern Europe",
    "Italy": "Southern Europe",
    "Greece": "Southern Europe",
    "Turkey": "Southeastern Europe",
    "Russia": "Eastern Europe",
    "Ukraine": "Eastern Europe",
    "Sweden": "Northern Europe",
    "Denmark": "Northern Europe",
    "Norway": "Northern Europe",
    "Finland": "Northern Europe",
    "Japan": "East Asia",
    "South Korea": "East Asia",
    "China": "East Asia",
    "Taiwan": "East Asia",
    "Mongolia": "East Asia",
    "Thailand": "Southeast Asia",
    "Vietnam": "Southeast Asia",
    "Malaysia": "Southeast Asia",
    "Indonesia": "Southeast Asia",
    "the Philippines": "Southeast Asia",
    "India": "South Asia",
    "Pakistan": "South Asia",
    "Bangladesh": "South Asia",
    "Nepal": "South Asia",
    "the United Arab Emirates": "the Middle East",
    "Saudi Arabia": "the Middle East",
    "Iran": "the Middle East",
    "Iraq": "the Middle East",
    "Qatar": "the Middle East",
    "the United States": "North America",
    "Canada": "North America",
    "Mexico": "Latin America",
    "Cuba": "the Caribbean",
    "Brazil": "South America",
    "Argentina": "South America",
    "Peru": "South America",
    "Colombia": "South America",
    "Chile": "South America",
    "Ecuador": "South America",
    "Venezuela": "South America",
    "Uruguay": "South America",
    "Egypt": "North Africa",
    "Morocco": "North Africa",
    "Tunisia": "North Africa",
    "Nigeria": "West Africa",
    "Ghana": "West Africa",
    "Senegal": "West Africa",
    "Kenya": "East Africa",
    "Uganda": "East Africa",
    "Ethiopia": "East Africa",
    "Tanzania": "East Africa",
    "the Democratic Republic of the Congo": "Central Africa",
    "Angola": "Central Africa",
    "South Africa": "Southern Africa",
    "Australia": "Australasia",
    "New Zealand": "Australasia",
    "Fiji": "the Pacific Islands",
}


def _city(
    name,
    *,
    variants=(),
    country,
    continent,
    hemisphere,
    languages,
    population,
    climate,
    sea=None,
    river=None,
    capital,
    landmarks,
    foods,
    sport,
    known_for,
):
    return name, {
        "variants": list(variants),
        "country": country,
        "continent": continent,
        "region": _COUNTRY_REGION[country],
        "hemisphere": hemisphere,
        "languages": list(languages),
        "population": population,
        "climate": climate,
        "coastal": sea is not None,
        "sea": sea,
        "river": river,
        "capital": capital,
        "landmarks": list(landmarks),
        "foods": list(foods),
        "sport": sport,
        "known_for": known_for,
    }


N, S = "northern", "southern"
EU, AS, NA, SA, AF, OC = "Europe", "Asia", "North America", "South America", "Africa", "Oceania"

# ``sea``: the body of water a coastal city lies on (None = inland); ``river``: the river it lies on
# (None = no major river). Both are phrases that follow "My city lies on ...".
_CITIES = [
    # ---------------------------------------------------------------- Europe (25)
    _city(
        "London",
        country="the United Kingdom",
        continent=EU,
        hemisphere=N,
        languages=["English"],
        population=O10,
        climate=OCEAN,
        river="the Thames",
        capital=True,
        landmarks=["Big Ben", "Tower Bridge", "Buckingham Palace"],
        foods=["fish and chips", "the full English breakfast"],
        sport=FOOTBALL,
        known_for="its royal palaces, West End theatres and global finance",
    ),
    _city(
        "Paris",
        country="France",
        continent=EU,
        hemisphere=N,
        languages=["French"],
        population=O10,
        climate=OCEAN,
        river="the Seine",
        capital=True,
        landmarks=["the Eiffel Tower", "the Louvre", "Notre-Dame Cathedral"],
        foods=["croissants", "baguettes", "French onion soup"],
        sport=FOOTBALL,
        known_for="art, fashion, cafes and romance",
    ),
    _city(
        "Berlin",
        country="Germany",
        continent=EU,
        hemisphere=N,
        languages=["German"],
        population=M5_10,
        climate=OCEAN,
        river="the Spree",
        capital=True,
        landmarks=["the Brandenburg Gate", "the Reichstag building", "the East Side Gallery"],
        foods=["currywurst", "doner kebab"],
        sport=FOOTBALL,
        known_for="the fall of the Wall in 1989, its museums and its techno clubs",
    ),
    _city(
        "Madrid",
        country="Spain",
        continent=EU,
        hemisphere=N,
        languages=["Spanish"],
        population=M5_10,
        climate=MED,
        river="the Manzanares",
        capital=True,
        landmarks=["the Royal Palace", "the Prado Museum", "Retiro Park"],
        foods=["chickpea stew (cocido)", "calamari sandwiches", "churros with chocolate"],
        sport=FOOTBALL,
        known_for="its great art museums, royal palace and late-night life",
    ),
    _city(
        "Rome",
        variants=["Roma"],
        country="Italy",
        continent=EU,
        hemisphere=N,
        languages=["Italian"],
        population=M1_5,
        climate=MED,
        river="the Tiber",
        capital=True,
        landmarks=["the Colosseum", "the Pantheon", "the Trevi Fountain"],
        foods=["carbonara pasta", "cacio e pepe", "suppli rice balls"],
        sport=FOOTBALL,
        known_for="the ruins of an ancient empire and its Renaissance churches",
    ),
    _city(
        "Barcelona",
        country="Spain",
        continent=EU,
        hemisphere=N,
        languages=["Catalan", "Spanish"],
        population=M5_10,
        climate=MED,
        sea="the Mediterranean Sea",
        capital=False,
        landmarks=["the Sagrada Familia", "Park Guell", "La Rambla"],
        foods=["bread with tomato (pa amb tomaquet)", "seafood paella", "crema catalana"],
        sport=FOOTBALL,
        known_for="Gaudi's architecture, its beaches and Catalan culture",
    ),
    _city(
        "Lisbon",
        variants=["Lisboa"],
        country="Portugal",
        continent=EU,
        hemisphere=N,
        languages=["Portuguese"],
        population=M1_5,
        climate=MED,
        sea="the Atlantic Ocean, at the mouth of a wide estuary",
        river="the Tagus",
        capital=True,
        landmarks=["Belem Tower", "the Jeronimos Monastery", "Sao Jorge Castle"],
        foods=["custard tarts (pasteis de nata)", "grilled sardines", "salt cod (bacalhau)"],
        sport=FOOTBALL,
        known_for="its steep hills, yellow trams and fado music",
    ),
    _city(
        "Amsterdam",
        country="the Netherlands",
        continent=EU,
        hemisphere=N,
        languages=["Dutch"],
        population=M1_5,
        climate=OCEAN,
        river="the Amstel",
        capital=True,
        landmarks=["the Rijksmuseum", "the Anne Frank House", "the canal ring"],
        foods=["stroopwafels", "raw herring", "bitterballen"],
        sport=FOOTBALL,
        known_for="its canals, bicycles and Golden Age paintings",
    ),
    _city(
        "Vienna",
        variants=["Wien"],
        country="Austria",
        continent=EU,
        hemisphere=N,
        languages=["German"],
        population=M1_5,
        climate=OCEAN,
        river="the Danube",
        capital=True,
        landmarks=["Schonbrunn Palace", "St. Stephen's Cathedral", "the Hofburg"],
        foods=["breaded veal schnitzel", "Sachertorte", "apple strudel"],
        sport=FOOTBALL,
        known_for="classical music, grand coffee houses and imperial palaces",
    ),
    _city(
        "Prague",
        variants=["Praha"],
        country="the Czech Republic",
        continent=EU,
        hemisphere=N,
        languages=["Czech"],
        population=M1_5,
        climate=OCEAN,
        river="the Vltava",
        capital=True,
        landmarks=[
            "Charles Bridge",
            "the hilltop castle complex",
            "the Old Town astronomical clock",
        ],
        foods=["svickova (beef in cream sauce)", "goulash with dumplings", "trdelnik"],
        sport="ice hockey",
        known_for="its medieval old town, many spires and pilsner beer",
    ),
    _city(
        "Athens",
        country="Greece",
        continent=EU,
        hemisphere=N,
        languages=["Greek"],
        population=M1_5,
        climate=MED,
        sea="the Saronic Gulf of the Aegean Sea, an arm of the Mediterranean Sea",
        capital=True,
        landmarks=["the Acropolis", "the Parthenon", "the Temple of Olympian Zeus"],
        foods=["souvlaki", "moussaka", "Greek salad"],
        sport=FOOTBALL,
        known_for="ancient democracy, philosophy and classical temples",
    ),
    _city(
        "Moscow",
        country="Russia",
        continent=EU,
        hemisphere=N,
        languages=["Russian"],
        population=O10,
        climate=CONT,
        river="the Moskva River",
        capital=True,
        landmarks=["the Kremlin", "Red Square", "St. Basil's Cathedral"],
        foods=["borscht", "pelmeni dumplings", "blini pancakes"],
        sport=FOOTBALL,
        known_for="the Kremlin, the Bolshoi ballet and onion-domed churches",
    ),
    _city(
        "Saint Petersburg",
        variants=["St. Petersburg", "St Petersburg", "Petersburg", "Leningrad"],
        country="Russia",
        continent=EU,
        hemisphere=N,
        languages=["Russian"],
        population=M5_10,
        climate=CONT,
        sea="the Gulf of Finland, the eastern arm of the Baltic Sea",
        river="the Neva",
        capital=False,
        landmarks=[
            "the Hermitage Museum",
            "the Peter and Paul Fortress",
            "the Church of the Savior on Spilled Blood",
        ],
        foods=["pyshki doughnuts", "beef stroganoff"],
        sport=FOOTBALL,
        known_for=(
            "the summer White Nights, imperial palaces and canals; it was Russia's imperial capital"
        ),
    ),
    _city(
        "Istanbul",
        variants=["Constantinople"],
        country="Turkey",
        continent=EU,
        hemisphere=N,
        languages=["Turkish"],
        population=O10,
        climate=MED,
        sea="the Bosphorus strait, between the Black Sea and the Sea of Marmara",
        capital=False,
        landmarks=["the Hagia Sophia", "the Blue Mosque", "the Grand Bazaar"],
        foods=["doner kebab", "baklava", "simit bread rings"],
        sport=FOOTBALL,
        known_for="spanning Europe and Asia and its Byzantine and Ottoman past",
    ),
    _city(
        "Dublin",
        country="Ireland",
        continent=EU,
        hemisphere=N,
        languages=["English"],
        population=M1_5,
        climate=OCEAN,
        sea="a bay of the Irish Sea",
        river="the Liffey",
        capital=True,
        landmarks=["Trinity College", "the Guinness Storehouse", "the Temple Bar district"],
        foods=["Irish stew", "coddle", "soda bread"],
        sport="Gaelic football",
        known_for="its pubs, stout beer and great writers",
    ),
    _city(
        "Stockholm",
        country="Sweden",
        continent=EU,
        hemisphere=N,
        languages=["Swedish"],
        population=M1_5,
        climate=CONT,
        sea="the Baltic Sea",
        capital=True,
        landmarks=[
            "Gamla Stan old town",
            "the Vasa Museum",
            "the City Hall where the Nobel banquet is held",
        ],
        foods=["meatballs with lingonberries", "cinnamon buns", "pickled herring"],
        sport=FOOTBALL,
        known_for="being built on fourteen islands and hosting the Nobel Prize banquet",
    ),
    _city(
        "Copenhagen",
        variants=["Kobenhavn", "København"],
        country="Denmark",
        continent=EU,
        hemisphere=N,
        languages=["Danish"],
        population=M1_5,
        climate=OCEAN,
        sea="the Oresund strait, at the entrance to the Baltic Sea",
        capital=True,
        landmarks=["the Little Mermaid statue", "Tivoli Gardens", "the Nyhavn harbour"],
        foods=["open sandwiches (smorrebrod)", "Danish pastries"],
        sport=FOOTBALL,
        known_for="cycling, design and New Nordic cuisine",
    ),
    _city(
        "Oslo",
        country="Norway",
        continent=EU,
        hemisphere=N,
        languages=["Norwegian"],
        population=M1_5,
        climate=CONT,
        sea="a long fjord that opens to the North Sea",
        capital=True,
        landmarks=["the Opera House", "the Vigeland sculpture park", "the Holmenkollen ski jump"],
        foods=["brown cheese", "smoked salmon", "fish soup"],
        sport=FOOTBALL,
        known_for="the Nobel Peace Prize ceremony, fjords and Viking history",
    ),
    _city(
        "Helsinki",
        country="Finland",
        continent=EU,
        hemisphere=N,
        languages=["Finnish"],
        population=M1_5,
        climate=CONT,
        sea="the Gulf of Finland, an arm of the Baltic Sea",
        capital=True,
        landmarks=[
            "the white Lutheran Cathedral",
            "the Suomenlinna sea fortress",
            "the Temppeliaukio rock church",
        ],
        foods=["salmon soup", "Karelian pies", "rye bread"],
        sport="ice hockey",
        known_for="Nordic design, saunas and islands in the Baltic",
    ),
    _city(
        "Warsaw",
        variants=["Warszawa"],
        country="Poland",
        continent=EU,
        hemisphere=N,
        languages=["Polish"],
        population=M1_5,
        climate=CONT,
        river="the Vistula",
        capital=True,
        landmarks=["the Royal Castle", "the Palace of Culture and Science", "the rebuilt Old Town"],
        foods=["pierogi", "zurek sour rye soup", "paczki doughnuts"],
        sport=FOOTBALL,
        known_for="its Old Town rebuilt after the Second World War and as Chopin's home",
    ),
    _city(
        "Budapest",
        country="Hungary",
        continent=EU,
        hemisphere=N,
        languages=["Hungarian"],
        population=M1_5,
        climate=CONT,
        river="the Danube",
        capital=True,
        landmarks=["the Parliament Building", "Buda Castle", "the Chain Bridge"],
        foods=["goulash", "langos fried bread", "chimney cake"],
        sport=FOOTBALL,
        known_for="its thermal baths and grand views over the Danube",
    ),
    _city(
        "Milan",
        variants=["Milano"],
        country="Italy",
        continent=EU,
        hemisphere=N,
        languages=["Italian"],
        population=M5_10,
        climate=HSUB,
        capital=False,
        landmarks=[
            "the Duomo cathedral",
            "the Galleria Vittorio Emanuele II",
            "La Scala opera house",
        ],
        foods=["saffron risotto", "panettone", "breaded veal cutlet (cotoletta)"],
        sport=FOOTBALL,
        known_for="fashion, design, finance and a famous Last Supper painting",
    ),
    _city(
        "Venice",
        variants=["Venezia"],
        country="Italy",
        continent=EU,
        hemisphere=N,
        languages=["Italian"],
        population=U1,
        climate=HSUB,
        sea="a lagoon of the Adriatic Sea, an arm of the Mediterranean Sea",
        capital=False,
        landmarks=["St Mark's Basilica", "the Grand Canal", "the Rialto Bridge"],
        foods=["cicchetti snacks", "squid-ink risotto", "tiramisu"],
        sport=FOOTBALL,
        known_for="its canals, gondolas and Carnival masks",
    ),
    _city(
        "Brussels",
        variants=["Bruxelles", "Brussel"],
        country="Belgium",
        continent=EU,
        hemisphere=N,
        languages=["French", "Dutch"],
        population=M1_5,
        climate=OCEAN,
        river="the Senne, now mostly covered over",
        capital=True,
        landmarks=["the Atomium", "the Grand-Place", "the Manneken Pis statue"],
        foods=["waffles", "fries with mayonnaise", "mussels"],
        sport=FOOTBALL,
        known_for="the headquarters of the European Union, chocolate and comics",
    ),
    _city(
        "Kyiv",
        variants=["Kiev"],
        country="Ukraine",
        continent=EU,
        hemisphere=N,
        languages=["Ukrainian"],
        population=M1_5,
        climate=CONT,
        river="the Dnipro",
        capital=True,
        landmarks=[
            "St Sophia's Cathedral",
            "the Pechersk Lavra monastery",
            "Independence Square (Maidan)",
        ],
        foods=["borscht", "varenyky dumplings", "syrnyky"],
        sport=FOOTBALL,
        known_for="its golden-domed churches and its Independence Square",
    ),
    # ---------------------------------------------------------------- Asia (27)
    _city(
        "Tokyo",
        country="Japan",
        continent=AS,
        hemisphere=N,
        languages=["Japanese"],
        population=O10,
        climate=HSUB,
        sea="a large bay of the Pacific Ocean",
        river="the Sumida River",
        capital=True,
        landmarks=["the Skytree tower", "Senso-ji temple", "the Shibuya crossing"],
        foods=["sushi", "ramen", "tempura"],
        sport="baseball",
        known_for=(
            "being one of the world's largest metropolitan areas, technology and neon-lit districts"
        ),
    ),
    _city(
        "Osaka",
        country="Japan",
        continent=AS,
        hemisphere=N,
        languages=["Japanese"],
        population=O10,
        climate=HSUB,
        sea="a bay of the Seto Inland Sea, which connects to the Pacific Ocean",
        river="the Yodo River",
        capital=False,
        landmarks=[
            "the castle with its golden roof ornaments",
            "the Dotonbori canal district",
            "Universal Studios Japan",
        ],
        foods=["takoyaki", "okonomiyaki", "kushikatsu"],
        sport="baseball",
        known_for="being the nation's kitchen, its comedians and its merchant culture",
    ),
    _city(
        "Kyoto",
        country="Japan",
        continent=AS,
        hemisphere=N,
        languages=["Japanese"],
        population=M1_5,
        climate=HSUB,
        river="the Kamo River",
        capital=False,
        landmarks=[
            "the Golden Pavilion (Kinkaku-ji)",
            "Fushimi Inari shrine",
            "Kiyomizu-dera temple",
        ],
        foods=["kaiseki cuisine", "matcha sweets", "yudofu tofu"],
        sport="baseball",
        known_for=(
            "its thousands of temples, the Gion geisha district and being the old imperial capital"
        ),
    ),
    _city(
        "Seoul",
        country="South Korea",
        continent=AS,
        hemisphere=N,
        languages=["Korean"],
        population=O10,
        climate=CONT,
        river="the Han River",
        capital=True,
        landmarks=["Gyeongbokgung Palace", "Namsan Tower", "Bukchon Hanok Village"],
        foods=["kimchi", "bibimbap", "Korean barbecue"],
        sport="baseball",
        known_for="K-pop, technology companies and royal palaces",
    ),
    _city(
        "Busan",
        variants=["Pusan"],
        country="South Korea",
        continent=AS,
        hemisphere=N,
        languages=["Korean"],
        population=M1_5,
        climate=HSUB,
        sea="the Korea Strait, between the Sea of Japan and the East China Sea",
        river="the Nakdong River",
        capital=False,
        landmarks=["Haeundae Beach", "Gamcheon Culture Village", "Jagalchi fish market"],
        foods=[
            "pork and rice soup (dwaeji gukbap)",
            "raw fish",
            "seed-filled pancakes (ssiat hotteok)",
        ],
        sport="baseball",
        known_for="its beaches, a huge container port and an international film festival",
    ),
    _city(
        "Beijing",
        variants=["Peking"],
        country="China",
        continent=AS,
        hemisphere=N,
        languages=["Mandarin Chinese"],
        population=O10,
        climate=CONT,
        capital=True,
        landmarks=["the Forbidden City", "Tiananmen Square", "the Temple of Heaven"],
        foods=["roast duck", "jianbing crepes", "zhajiangmian noodles"],
        sport="basketball",
        known_for="imperial palaces, the nearby Great Wall and the 2008 Summer Olympics",
    ),
    _city(
        "Shanghai",
        country="China",
        continent=AS,
        hemisphere=N,
        languages=["Mandarin Chinese"],
        population=O10,
        climate=HSUB,
        sea="the East China Sea of the Pacific Ocean, at the mouth of the Yangtze",
        river="the Huangpu River, near the mouth of the Yangtze",
        capital=False,
        landmarks=["the Bund waterfront", "the Oriental Pearl Tower", "Yu Garden"],
        foods=["soup dumplings (xiaolongbao)", "pan-fried buns (shengjian bao)", "hairy crab"],
        sport="basketball",
        known_for="finance, a futuristic skyline and the world's busiest container port",
    ),
    _city(
        "Guangzhou",
        country="China",
        continent=AS,
        hemisphere=N,
        languages=["Cantonese", "Mandarin Chinese"],
        population=O10,
        climate=HSUB,
        river="the Pearl River",
        capital=False,
        landmarks=["the Chen Clan Ancestral Hall", "Shamian Island", "Yuexiu Park"],
        foods=["dim sum", "char siu pork", "wonton noodles"],
        sport=FOOTBALL,
        known_for="Cantonese cuisine and a huge trade fair held twice a year",
    ),
    _city(
        "Taipei",
        country="Taiwan",
        continent=AS,
        hemisphere=N,
        languages=["Mandarin Chinese"],
        population=M5_10,
        climate=HSUB,
        river="the Tamsui River",
        capital=True,
        landmarks=[
            "the 101 skyscraper",
            "the National Palace Museum",
            "Chiang Kai-shek Memorial Hall",
        ],
        foods=["beef noodle soup", "bubble tea", "stinky tofu"],
        sport="baseball",
        known_for="night markets, bubble tea and a record-breaking skyscraper",
    ),
    _city(
        "Bangkok",
        variants=["Krung Thep"],
        country="Thailand",
        continent=AS,
        hemisphere=N,
        languages=["Thai"],
        population=O10,
        climate=TROP,
        river="the Chao Phraya",
        capital=True,
        landmarks=["the Grand Palace", "Wat Arun", "Wat Pho"],
        foods=["pad thai", "tom yum soup", "mango sticky rice"],
        sport="Muay Thai boxing",
        known_for="street food, ornate temples and floating markets",
    ),
    _city(
        "Hanoi",
        country="Vietnam",
        continent=AS,
        hemisphere=N,
        languages=["Vietnamese"],
        population=M5_10,
        climate=HSUB,
        river="the Red River",
        capital=True,
        landmarks=["Hoan Kiem Lake", "the Temple of Literature", "the One Pillar Pagoda"],
        foods=["pho", "bun cha", "egg coffee"],
        sport=FOOTBALL,
        known_for="its Old Quarter, French colonial buildings and motorbike-filled streets",
    ),
    _city(
        "Kuala Lumpur",
        country="Malaysia",
        continent=AS,
        hemisphere=N,
        languages=["Malay"],
        population=M5_10,
        climate=TROP,
        river="the Klang River",
        capital=True,
        landmarks=["the Petronas Twin Towers", "Batu Caves", "Merdeka Square"],
        foods=["nasi lemak", "satay", "roti canai"],
        sport="badminton",
        known_for="the twin towers, shopping malls and multicultural street food",
    ),
    _city(
        "Jakarta",
        country="Indonesia",
        continent=AS,
        hemisphere=S,
        languages=["Indonesian"],
        population=O10,
        climate=TROP,
        sea="the Java Sea",
        river="the Ciliwung River",
        capital=True,
        landmarks=["the National Monument (Monas)", "Istiqlal Mosque", "the Kota Tua old town"],
        foods=["nasi goreng", "satay", "soto betawi soup"],
        sport=FOOTBALL,
        known_for="heavy traffic, sinking land and a plan to move the capital elsewhere",
    ),
    _city(
        "Manila",
        country="the Philippines",
        continent=AS,
        hemisphere=N,
        languages=["Filipino (Tagalog)", "English"],
        population=O10,
        climate=TROP,
        sea="a large bay of the South China Sea, part of the Pacific Ocean",
        river="the Pasig River",
        capital=True,
        landmarks=["the Intramuros walled city", "Rizal Park", "San Agustin Church"],
        foods=["adobo", "sinigang soup", "lechon roast pig"],
        sport="basketball",
        known_for="Spanish colonial history, colourful jeepneys and sunsets over the bay",
    ),
    _city(
        "Mumbai",
        variants=["Bombay"],
        country="India",
        continent=AS,
        hemisphere=N,
        languages=["Marathi", "Hindi"],
        population=O10,
        climate=TROP,
        sea="the Arabian Sea, part of the Indian Ocean",
        capital=False,
        landmarks=["the Gateway of India", "Marine Drive", "Chhatrapati Shivaji Terminus"],
        foods=["vada pav", "pav bhaji", "bhel puri"],
        sport="cricket",
        known_for="Bollywood films, finance and crowded commuter trains",
    ),
    _city(
        "Delhi",
        variants=["New Delhi"],
        country="India",
        continent=AS,
        hemisphere=N,
        languages=["Hindi"],
        population=O10,
        climate=HSUB,
        river="the Yamuna",
        capital=True,
        landmarks=["the Red Fort", "Qutub Minar", "Humayun's Tomb"],
        foods=["butter chicken", "chole bhature", "stuffed parathas"],
        sport="cricket",
        known_for="Mughal monuments, the seat of national government and busy bazaars",
    ),
    _city(
        "Kolkata",
        variants=["Calcutta"],
        country="India",
        continent=AS,
        hemisphere=N,
        languages=["Bengali"],
        population=O10,
        climate=TROP,
        river="the Hooghly",
        capital=False,
        landmarks=["the Victoria Memorial", "Howrah Bridge", "Dakshineswar Temple"],
        foods=["rasgulla", "fish curry", "kathi rolls"],
        sport=FOOTBALL,
        known_for="literature, the Durga Puja festival and yellow taxis",
    ),
    _city(
        "Bangalore",
        variants=["Bengaluru"],
        country="India",
        continent=AS,
        hemisphere=N,
        languages=["Kannada"],
        population=O10,
        climate=TROP,
        capital=False,
        landmarks=["the Lalbagh botanical garden", "the Tudor-style palace", "Cubbon Park"],
        foods=["masala dosa", "bisi bele bath", "filter coffee"],
        sport="cricket",
        known_for="the information technology industry and its many parks",
    ),
    _city(
        "Karachi",
        country="Pakistan",
        continent=AS,
        hemisphere=N,
        languages=["Urdu"],
        population=O10,
        climate=ARID,
        sea="the Arabian Sea, part of the Indian Ocean",
        capital=False,
        landmarks=["the Mazar-e-Quaid mausoleum", "Clifton Beach", "Frere Hall"],
        foods=["biryani", "nihari", "bun kebab"],
        sport="cricket",
        known_for="the country's biggest port and its business life",
    ),
    _city(
        "Dhaka",
        country="Bangladesh",
        continent=AS,
        hemisphere=N,
        languages=["Bengali"],
        population=O10,
        climate=TROP,
        river="the Buriganga",
        capital=True,
        landmarks=[
            "Lalbagh Fort",
            "Ahsan Manzil (the Pink Palace)",
            "the National Parliament House",
        ],
        foods=["kacchi biryani", "hilsa fish", "fuchka"],
        sport="cricket",
        known_for="cycle rickshaws, the garment industry and dense crowds",
    ),
    _city(
        "Kathmandu",
        variants=["Katmandu"],
        country="Nepal",
        continent=AS,
        hemisphere=N,
        languages=["Nepali"],
        population=M1_5,
        climate=HIGH,
        river="the Bagmati",
        capital=True,
        landmarks=["Swayambhunath stupa", "Boudhanath stupa", "Durbar Square"],
        foods=["momo dumplings", "dal bhat"],
        sport=FOOTBALL,
        known_for="being the gateway to the Himalayas and its ancient temples",
    ),
    _city(
        "Dubai",
        country="the United Arab Emirates",
        continent=AS,
        hemisphere=N,
        languages=["Arabic", "English"],
        population=M1_5,
        climate=ARID,
        sea="the Persian Gulf, an arm of the Indian Ocean",
        capital=False,
        landmarks=["the Burj Khalifa", "the Palm Jumeirah", "the Burj Al Arab"],
        foods=["shawarma", "machboos spiced rice", "luqaimat dumplings"],
        sport=FOOTBALL,
        known_for="the world's tallest building, luxury shopping and artificial islands",
    ),
    _city(
        "Riyadh",
        country="Saudi Arabia",
        continent=AS,
        hemisphere=N,
        languages=["Arabic"],
        population=M5_10,
        climate=ARID,
        capital=True,
        landmarks=["the Kingdom Centre tower", "Masmak Fort", "the Diriyah historic district"],
        foods=["kabsa", "dates", "jareesh"],
        sport=FOOTBALL,
        known_for="oil wealth, desert surroundings and rapid growth",
    ),
    _city(
        "Tehran",
        variants=["Teheran"],
        country="Iran",
        continent=AS,
        hemisphere=N,
        languages=["Persian (Farsi)"],
        population=O10,
        climate=ARID,
        capital=True,
        landmarks=["the Azadi Tower", "Golestan Palace", "the Milad Tower"],
        foods=["chelo kebab", "ghormeh sabzi stew", "tahdig crispy rice"],
        sport=FOOTBALL,
        known_for="its bazaars and the snowy Alborz mountains behind it",
    ),
    _city(
        "Baghdad",
        country="Iraq",
        continent=AS,
        hemisphere=N,
        languages=["Arabic"],
        population=M5_10,
        climate=ARID,
        river="the Tigris",
        capital=True,
        landmarks=["the Al-Shaheed Monument", "Al-Mustansiriya school", "the Abbasid Palace"],
        foods=["masgouf grilled carp", "dolma", "kebab"],
        sport=FOOTBALL,
        known_for="the House of Wisdom of the Abbasid caliphs and the Thousand and One Nights",
    ),
    _city(
        "Ulaanbaatar",
        variants=["Ulan Bator", "Ulaan Baatar"],
        country="Mongolia",
        continent=AS,
        hemisphere=N,
        languages=["Mongolian"],
        population=M1_5,
        climate=SUBARC,
        river="the Tuul River",
        capital=True,
        landmarks=["Sukhbaatar Square", "Gandan Monastery", "the Zaisan Memorial"],
        foods=["buuz dumplings", "khuushuur fried pastries", "fermented mare's milk (airag)"],
        sport="wrestling",
        known_for="being the coldest national capital and a gateway to the steppe",
    ),
    _city(
        "Doha",
        country="Qatar",
        continent=AS,
        hemisphere=N,
        languages=["Arabic"],
        population=M1_5,
        climate=ARID,
        sea="the Persian Gulf, an arm of the Indian Ocean",
        capital=True,
        landmarks=["the Museum of Islamic Art", "Souq Waqif", "the Corniche promenade"],
        foods=["machboos spiced rice", "harees"],
        sport=FOOTBALL,
        known_for="hosting the 2022 football World Cup and natural gas wealth",
    ),
    # ---------------------------------------------------------------- North America (16)
    _city(
        "New York",
        variants=["New York City", "NYC"],
        country="the United States",
        continent=NA,
        hemisphere=N,
        languages=["English"],
        population=O10,
        climate=HSUB,
        sea="a large natural harbour on the Atlantic Ocean",
        river="the Hudson",
        capital=False,
        landmarks=["the Statue of Liberty", "the Empire State Building", "Times Square"],
        foods=["pizza slices", "bagels", "cheesecake"],
        sport="baseball",
        known_for="Broadway theatre, Wall Street and skyscrapers",
    ),
    _city(
        "Los Angeles",
        country="the United States",
        continent=NA,
        hemisphere=N,
        languages=["English", "Spanish"],
        population=O10,
        climate=MED,
        sea="the Pacific Ocean",
        river="a river of the same name that runs in a concrete channel",
        capital=False,
        landmarks=["the Hollywood Sign", "the Griffith Observatory", "the Santa Monica Pier"],
        foods=["tacos", "Korean-Mexican fusion tacos", "burgers"],
        sport="basketball",
        known_for="the Hollywood film industry, beaches and freeways",
    ),
    _city(
        "Chicago",
        country="the United States",
        continent=NA,
        hemisphere=N,
        languages=["English"],
        population=M5_10,
        climate=CONT,
        river="a river of the same name that is dyed green every March",
        capital=False,
        landmarks=["the Willis Tower", "Cloud Gate (the Bean)", "Millennium Park"],
        foods=["deep-dish pizza", "hot dogs with all the toppings", "Italian beef sandwiches"],
        sport="American football",
        known_for="skyscraper architecture, blues music and windy lakefront weather",
    ),
    _city(
        "San Francisco",
        variants=["San Fran"],
        country="the United States",
        continent=NA,
        hemisphere=N,
        languages=["English"],
        population=M1_5,
        climate=MED,
        sea="the Pacific Ocean and a large bay",
        capital=False,
        landmarks=["the Golden Gate Bridge", "Alcatraz Island", "the cable cars"],
        foods=["sourdough bread", "Mission-style burritos", "cioppino fish stew"],
        sport="baseball",
        known_for="steep hills, summer fog and the nearby tech industry",
    ),
    _city(
        "Miami",
        country="the United States",
        continent=NA,
        hemisphere=N,
        languages=["Spanish", "English"],
        population=M5_10,
        climate=TROP,
        sea="the Atlantic Ocean and a shallow bay",
        capital=False,
        landmarks=["South Beach", "the Art Deco Historic District", "Vizcaya Museum and Gardens"],
        foods=["Cuban sandwiches", "stone crabs", "key lime pie"],
        sport="American football",
        known_for="beaches, Latin American culture and nightlife",
    ),
    _city(
        "Las Vegas",
        variants=["Vegas"],
        country="the United States",
        continent=NA,
        hemisphere=N,
        languages=["English"],
        population=M1_5,
        climate=ARID,
        capital=False,
        landmarks=["the Strip", "the Bellagio fountains", "the Fremont Street Experience"],
        foods=["all-you-can-eat buffets", "shrimp cocktail"],
        sport="boxing",
        known_for="casinos, big stage shows and quick weddings",
    ),
    _city(
        "Boston",
        country="the United States",
        continent=NA,
        hemisphere=N,
        languages=["English"],
        population=M1_5,
        climate=CONT,
        sea="a bay of the Atlantic Ocean",
        river="the Charles River",
        capital=False,
        landmarks=["the Freedom Trail", "Fenway Park", "Faneuil Hall"],
        foods=["clam chowder", "lobster rolls", "baked beans"],
        sport="baseball",
        known_for="its universities and the American Revolution",
    ),
    _city(
        "New Orleans",
        country="the United States",
        continent=NA,
        hemisphere=N,
        languages=["English"],
        population=M1_5,
        climate=HSUB,
        river="the Mississippi",
        capital=False,
        landmarks=["the French Quarter", "Bourbon Street", "Jackson Square"],
        foods=["gumbo", "beignets", "jambalaya"],
        sport="American football",
        known_for="jazz, Mardi Gras and Creole cooking",
    ),
    _city(
        "Seattle",
        country="the United States",
        continent=NA,
        hemisphere=N,
        languages=["English"],
        population=M1_5,
        climate=OCEAN,
        sea="Puget Sound, an inlet of the Pacific Ocean",
        capital=False,
        landmarks=["the Space Needle", "Pike Place Market", "the Museum of Pop Culture"],
        foods=["salmon", "coffee", "geoduck clams"],
        sport="American football",
        known_for="coffee culture, rainy weather, tech companies and grunge music",
    ),
    _city(
        "Philadelphia",
        variants=["Philly"],
        country="the United States",
        continent=NA,
        hemisphere=N,
        languages=["English"],
        population=M5_10,
        climate=HSUB,
        river="the Delaware and the Schuylkill",
        capital=False,
        landmarks=["the Liberty Bell", "Independence Hall", "the art museum steps"],
        foods=["cheesesteaks", "soft pretzels", "water ice"],
        sport="American football",
        known_for="the signing of the Declaration of Independence and a famous boxing film",
    ),
    _city(
        "Toronto",
        country="Canada",
        continent=NA,
        hemisphere=N,
        languages=["English"],
        population=M5_10,
        climate=CONT,
        river="the Humber River",
        capital=False,
        landmarks=["the CN Tower", "the Royal Ontario Museum", "Casa Loma"],
        foods=["peameal bacon sandwiches", "butter tarts"],
        sport="ice hockey",
        known_for="multicultural neighbourhoods, finance and a lakefront skyline",
    ),
    _city(
        "Montreal",
        variants=["Montréal"],
        country="Canada",
        continent=NA,
        hemisphere=N,
        languages=["French"],
        population=M1_5,
        climate=CONT,
        river="the St. Lawrence",
        capital=False,
        landmarks=["Notre-Dame Basilica", "Mount Royal", "the Olympic Stadium"],
        foods=["poutine", "wood-fired bagels", "smoked meat sandwiches"],
        sport="ice hockey",
        known_for="French-speaking culture, festivals and an underground city",
    ),
    _city(
        "Vancouver",
        country="Canada",
        continent=NA,
        hemisphere=N,
        languages=["English"],
        population=M1_5,
        climate=OCEAN,
        sea="an arm of the Pacific Ocean",
        river="the Fraser River",
        capital=False,
        landmarks=["Stanley Park", "Granville Island", "the Capilano Suspension Bridge"],
        foods=["sushi", "wild salmon", "Nanaimo bars"],
        sport="ice hockey",
        known_for="mountains beside the ocean, film studios and outdoor life",
    ),
    _city(
        "Mexico City",
        variants=["Ciudad de Mexico", "CDMX"],
        country="Mexico",
        continent=NA,
        hemisphere=N,
        languages=["Spanish"],
        population=O10,
        climate=HIGH,
        capital=True,
        landmarks=["the Zocalo square", "the Palace of Fine Arts", "Chapultepec Castle"],
        foods=["tacos al pastor", "tamales", "churros"],
        sport=FOOTBALL,
        known_for=(
            "being built on the Aztec capital Tenochtitlan, its museums and its high altitude"
        ),
    ),
    _city(
        "Guadalajara",
        country="Mexico",
        continent=NA,
        hemisphere=N,
        languages=["Spanish"],
        population=M5_10,
        climate=HSUB,
        capital=False,
        landmarks=[
            "the twin-spired Cathedral",
            "the Hospicio Cabanas",
            "the Tlaquepaque crafts district",
        ],
        foods=["drowned sandwiches (tortas ahogadas)", "birria stew", "pozole"],
        sport=FOOTBALL,
        known_for="mariachi music, tequila and charro horsemanship",
    ),
    _city(
        "Havana",
        variants=["La Habana", "Habana"],
        country="Cuba",
        continent=NA,
        hemisphere=N,
        languages=["Spanish"],
        population=M1_5,
        climate=TROP,
        sea="the Straits of Florida, between the Gulf of Mexico and the Atlantic Ocean",
        capital=True,
        landmarks=["the Malecon seafront", "El Capitolio", "the Morro Castle"],
        foods=["ropa vieja", "black beans and rice (moros y cristianos)"],
        sport="baseball",
        known_for="vintage American cars, cigars and salsa music",
    ),
    # ---------------------------------------------------------------- South America (11)
    _city(
        "Sao Paulo",
        variants=["São Paulo"],
        country="Brazil",
        continent=SA,
        hemisphere=S,
        languages=["Portuguese"],
        population=O10,
        climate=HSUB,
        river="the Tiete",
        capital=False,
        landmarks=["Paulista Avenue", "Ibirapuera Park", "the Municipal Theatre"],
        foods=["pizza", "pastel fried pastries", "mortadella sandwiches"],
        sport=FOOTBALL,
        known_for="being the largest city in South America and Brazil's business centre",
    ),
    _city(
        "Rio de Janeiro",
        variants=["Rio"],
        country="Brazil",
        continent=SA,
        hemisphere=S,
        languages=["Portuguese"],
        population=O10,
        climate=TROP,
        sea="the Atlantic Ocean and a large bay",
        capital=False,
        landmarks=["Christ the Redeemer", "Sugarloaf Mountain", "Copacabana Beach"],
        foods=["feijoada", "acai bowls", "churrasco grilled meat"],
        sport=FOOTBALL,
        known_for="Carnival, samba and beaches below green mountains",
    ),
    _city(
        "Brasilia",
        variants=["Brasília"],
        country="Brazil",
        continent=SA,
        hemisphere=S,
        languages=["Portuguese"],
        population=M1_5,
        climate=TROP,
        capital=True,
        landmarks=[
            "the Cathedral with its curved columns",
            "the National Congress",
            "the Alvorada Palace",
        ],
        foods=["Brazilian barbecue", "pequi rice"],
        sport=FOOTBALL,
        known_for=(
            "being a planned capital shaped like an airplane, with modernist buildings by Oscar "
            "Niemeyer"
        ),
    ),
    _city(
        "Buenos Aires",
        country="Argentina",
        continent=SA,
        hemisphere=S,
        languages=["Spanish"],
        population=O10,
        climate=HSUB,
        sea="the River Plate estuary, which opens to the Atlantic Ocean",
        river="the River Plate",
        capital=True,
        landmarks=["the Obelisk", "the Casa Rosada", "the Caminito street in La Boca"],
        foods=["asado barbecue", "empanadas", "dulce de leche"],
        sport=FOOTBALL,
        known_for="tango, steak and European-style avenues",
    ),
    _city(
        "Lima",
        country="Peru",
        continent=SA,
        hemisphere=S,
        languages=["Spanish"],
        population=O10,
        climate=ARID,
        sea="the Pacific Ocean",
        river="the Rimac",
        capital=True,
        landmarks=["the Plaza Mayor", "the Huaca Pucllana pyramid", "the Miraflores clifftops"],
        foods=["ceviche", "lomo saltado", "anticuchos"],
        sport=FOOTBALL,
        known_for="its celebrated cuisine, colonial centre and grey coastal skies",
    ),
    _city(
        "Cusco",
        variants=["Cuzco", "Qosqo"],
        country="Peru",
        continent=SA,
        hemisphere=S,
        languages=["Spanish", "Quechua"],
        population=U1,
        climate=HIGH,
        capital=False,
        landmarks=["Sacsayhuaman fortress", "the Plaza de Armas", "the Qorikancha temple"],
        foods=["roast guinea pig (cuy)", "alpaca steak", "chicha corn drink"],
        sport=FOOTBALL,
        known_for="being the old Inca capital and the gateway to Machu Picchu",
    ),
    _city(
        "Bogota",
        variants=["Bogotá"],
        country="Colombia",
        continent=SA,
        hemisphere=N,
        languages=["Spanish"],
        population=O10,
        climate=HIGH,
        river="a river of the same name on its western edge",
        capital=True,
        landmarks=["the Gold Museum", "Monserrate mountain", "the La Candelaria district"],
        foods=["ajiaco soup", "arepas", "tamales"],
        sport=FOOTBALL,
        known_for="its high altitude, gold museum and street art",
    ),
    _city(
        "Santiago",
        variants=["Santiago de Chile"],
        country="Chile",
        continent=SA,
        hemisphere=S,
        languages=["Spanish"],
        population=M5_10,
        climate=MED,
        river="the Mapocho",
        capital=True,
        landmarks=["San Cristobal Hill", "La Moneda Palace", "the Costanera Center tower"],
        foods=["empanadas", "pastel de choclo", "completo hot dogs"],
        sport=FOOTBALL,
        known_for="the snowy Andes behind it and nearby wine valleys",
    ),
    _city(
        "Quito",
        country="Ecuador",
        continent=SA,
        hemisphere=S,
        languages=["Spanish"],
        population=M1_5,
        climate=HIGH,
        capital=True,
        landmarks=[
            "the colonial old town",
            "the Basilica del Voto Nacional",
            "the Middle of the World monument",
        ],
        foods=["locro de papa potato soup", "hornado roast pork", "fried empanadas"],
        sport=FOOTBALL,
        known_for="being a high-altitude capital almost on the equator",
    ),
    _city(
        "Caracas",
        country="Venezuela",
        continent=SA,
        hemisphere=N,
        languages=["Spanish"],
        population=M1_5,
        climate=TROP,
        river="the Guaire",
        capital=True,
        landmarks=["El Avila mountain", "Plaza Bolivar", "the cable car (Teleferico)"],
        foods=["arepas", "pabellon criollo", "hallacas"],
        sport="baseball",
        known_for="being the birthplace of Simon Bolivar and its mountain backdrop",
    ),
    _city(
        "Montevideo",
        country="Uruguay",
        continent=SA,
        hemisphere=S,
        languages=["Spanish"],
        population=M1_5,
        climate=HSUB,
        sea="the River Plate estuary, near the Atlantic Ocean",
        river="the River Plate",
        capital=True,
        landmarks=["the Rambla seafront", "Palacio Salvo", "Plaza Independencia"],
        foods=["chivito sandwiches", "asado barbecue", "dulce de leche"],
        sport=FOOTBALL,
        known_for=(
            "a long seaside promenade, candombe drums and hosting the first football World Cup"
        ),
    ),
    # ---------------------------------------------------------------- Africa (14)
    _city(
        "Cairo",
        country="Egypt",
        continent=AF,
        hemisphere=N,
        languages=["Arabic"],
        population=O10,
        climate=ARID,
        river="the Nile",
        capital=True,
        landmarks=["the Pyramids of Giza", "the Egyptian Museum", "the Khan el-Khalili bazaar"],
        foods=["koshari", "ful medames", "falafel (taameya)"],
        sport=FOOTBALL,
        known_for="the pyramids, ancient Egyptian treasures and a thousand minarets",
    ),
    _city(
        "Lagos",
        country="Nigeria",
        continent=AF,
        hemisphere=N,
        languages=["English", "Yoruba"],
        population=O10,
        climate=TROP,
        sea="a lagoon on the Gulf of Guinea, part of the Atlantic Ocean",
        capital=False,
        landmarks=["the Lekki Conservation Centre", "the National Theatre", "Tafawa Balewa Square"],
        foods=["jollof rice", "suya", "puff-puff"],
        sport=FOOTBALL,
        known_for="Nollywood films, Afrobeats music and being Nigeria's commercial hub",
    ),
    _city(
        "Accra",
        country="Ghana",
        continent=AF,
        hemisphere=N,
        languages=["English", "Twi"],
        population=M1_5,
        climate=TROP,
        sea="the Gulf of Guinea, part of the Atlantic Ocean",
        capital=True,
        landmarks=["the Kwame Nkrumah Mausoleum", "Independence Arch", "Makola Market"],
        foods=["jollof rice", "banku with tilapia", "kelewele"],
        sport=FOOTBALL,
        known_for="highlife music, colourful markets and beaches",
    ),
    _city(
        "Dakar",
        country="Senegal",
        continent=AF,
        hemisphere=N,
        languages=["Wolof", "French"],
        population=M1_5,
        climate=ARID,
        sea="the Atlantic Ocean",
        capital=True,
        landmarks=["the African Renaissance Monument", "Goree Island", "the Grand Mosque"],
        foods=["thieboudienne fish and rice", "chicken yassa", "mafe peanut stew"],
        sport="wrestling",
        known_for=(
            "being the westernmost city of mainland Africa and the finish of a famous desert rally"
        ),
    ),
    _city(
        "Nairobi",
        country="Kenya",
        continent=AF,
        hemisphere=S,
        languages=["Swahili", "English"],
        population=M1_5,
        climate=HIGH,
        capital=True,
        landmarks=[
            "a national park with lions next to the skyline",
            "the Kenyatta International Convention Centre",
            "the Giraffe Centre",
        ],
        foods=["nyama choma grilled meat", "ugali", "sukuma wiki greens"],
        sport=FOOTBALL,
        known_for="safari tourism, long-distance runners and a fast-growing tech scene",
    ),
    _city(
        "Kampala",
        country="Uganda",
        continent=AF,
        hemisphere=N,
        languages=["English", "Luganda"],
        population=M1_5,
        climate=TROP,
        capital=True,
        landmarks=["the Kasubi Tombs", "the Uganda Martyrs Shrine", "the Gaddafi National Mosque"],
        foods=["rolex (a chapati egg roll)", "matoke plantains", "luwombo stew"],
        sport=FOOTBALL,
        known_for="being built on seven hills, boda-boda motorbike taxis and nearby Lake Victoria",
    ),
    _city(
        "Addis Ababa",
        country="Ethiopia",
        continent=AF,
        hemisphere=N,
        languages=["Amharic"],
        population=M5_10,
        climate=HIGH,
        capital=True,
        landmarks=[
            "the National Museum with the Lucy skeleton",
            "Holy Trinity Cathedral",
            "the Merkato market",
        ],
        foods=["injera flatbread", "doro wat chicken stew", "coffee ceremonies"],
        sport="athletics",
        known_for="the African Union headquarters, coffee culture and long-distance runners",
    ),
    _city(
        "Dar es Salaam",
        country="Tanzania",
        continent=AF,
        hemisphere=S,
        languages=["Swahili"],
        population=M5_10,
        climate=TROP,
        sea="the Indian Ocean",
        capital=False,
        landmarks=["the Kariakoo Market", "the National Museum", "Coco Beach"],
        foods=["chipsi mayai (chips omelette)", "mishkaki skewers", "pilau rice"],
        sport=FOOTBALL,
        known_for=(
            "being the largest city of Tanzania, a busy Indian Ocean port and the ferry gateway to "
            "Zanzibar"
        ),
    ),
    _city(
        "Kinshasa",
        country="the Democratic Republic of the Congo",
        continent=AF,
        hemisphere=S,
        languages=["Lingala", "French"],
        population=O10,
        climate=TROP,
        river="the Congo River",
        capital=True,
        landmarks=["the Boulevard du 30 Juin", "the Palais du Peuple", "the Academy of Fine Arts"],
        foods=["fufu", "moambe chicken", "pondu cassava leaves"],
        sport=FOOTBALL,
        known_for="Congolese rumba music and being the largest French-speaking city in the world",
    ),
    _city(
        "Luanda",
        country="Angola",
        continent=AF,
        hemisphere=S,
        languages=["Portuguese"],
        population=M5_10,
        climate=ARID,
        sea="the Atlantic Ocean",
        capital=True,
        landmarks=[
            "the Fortress of Sao Miguel",
            "the Marginal seafront",
            "the Agostinho Neto Mausoleum",
        ],
        foods=["chicken muamba", "funge", "calulu fish stew"],
        sport=FOOTBALL,
        known_for="oil wealth, a palm-lined bay and very high living costs",
    ),
    _city(
        "Johannesburg",
        variants=["Joburg", "Jozi", "Egoli"],
        country="South Africa",
        continent=AF,
        hemisphere=S,
        languages=["Zulu", "English"],
        population=M5_10,
        climate=HIGH,
        capital=False,
        landmarks=["the Apartheid Museum", "Vilakazi Street in Soweto", "Constitution Hill"],
        foods=["braai barbecue", "pap maize porridge", "kota sandwiches"],
        sport=FOOTBALL,
        known_for="gold mining history, business and the country's largest economy",
    ),
    _city(
        "Cape Town",
        variants=["Kaapstad"],
        country="South Africa",
        continent=AF,
        hemisphere=S,
        languages=["Afrikaans", "Xhosa", "English"],
        population=M1_5,
        climate=MED,
        sea="the Atlantic Ocean",
        capital=True,
        landmarks=["Table Mountain", "Robben Island", "the V&A Waterfront"],
        foods=["bobotie", "koeksisters", "braai barbecue"],
        sport="rugby union",
        known_for="being the seat of parliament, Table Mountain and nearby wine farms",
    ),
    _city(
        "Casablanca",
        country="Morocco",
        continent=AF,
        hemisphere=N,
        languages=["Arabic", "French"],
        population=M1_5,
        climate=MED,
        sea="the Atlantic Ocean",
        capital=False,
        landmarks=["the Hassan II Mosque", "the Corniche", "the old medina"],
        foods=["couscous", "tagine", "harira soup"],
        sport=FOOTBALL,
        known_for=(
            "a classic 1942 Hollywood film, Art Deco buildings and being the country's business "
            "capital"
        ),
    ),
    _city(
        "Tunis",
        country="Tunisia",
        continent=AF,
        hemisphere=N,
        languages=["Arabic", "French"],
        population=M1_5,
        climate=MED,
        sea="a lagoon on the Mediterranean Sea",
        capital=True,
        landmarks=["the medina", "the Bardo Museum", "the ruins of Carthage"],
        foods=["couscous", "brik pastry", "lablabi chickpea soup"],
        sport=FOOTBALL,
        known_for=(
            "the nearby ruins of Carthage, souks and the blue-and-white village of Sidi Bou Said"
        ),
    ),
    # ---------------------------------------------------------------- Oceania (7)
    _city(
        "Sydney",
        country="Australia",
        continent=OC,
        hemisphere=S,
        languages=["English"],
        population=M5_10,
        climate=HSUB,
        sea="the Tasman Sea of the Pacific Ocean",
        river="the Parramatta River",
        capital=False,
        landmarks=["the Opera House", "the Harbour Bridge", "Bondi Beach"],
        foods=["meat pies", "barramundi", "pavlova"],
        sport="rugby league",
        known_for="its harbour, beaches and New Year's Eve fireworks",
    ),
    _city(
        "Melbourne",
        country="Australia",
        continent=OC,
        hemisphere=S,
        languages=["English"],
        population=M5_10,
        climate=OCEAN,
        sea="a large bay off Bass Strait",
        river="the Yarra",
        capital=False,
        landmarks=[
            "Federation Square",
            "the Cricket Ground (MCG)",
            "the Royal Exhibition Building",
        ],
        foods=["flat white coffee", "dim sims", "souvlaki"],
        sport="Australian rules football",
        known_for="coffee culture, street-art laneways and the Australian Open tennis",
    ),
    _city(
        "Perth",
        country="Australia",
        continent=OC,
        hemisphere=S,
        languages=["English"],
        population=M1_5,
        climate=MED,
        sea="the Indian Ocean",
        river="the Swan River",
        capital=False,
        landmarks=["Kings Park", "Rottnest Island", "Cottesloe Beach"],
        foods=["Western rock lobster", "fish and chips"],
        sport="Australian rules football",
        known_for="being one of the most isolated big cities, sunny beaches and quokkas",
    ),
    _city(
        "Canberra",
        country="Australia",
        continent=OC,
        hemisphere=S,
        languages=["English"],
        population=U1,
        climate=OCEAN,
        river="the Molonglo",
        capital=True,
        landmarks=["Parliament House", "the Australian War Memorial", "Lake Burley Griffin"],
        foods=["black truffles", "cool-climate wines"],
        sport="rugby league",
        known_for=(
            "being a planned capital designed by Walter Burley Griffin and Marion Mahony Griffin"
        ),
    ),
    _city(
        "Auckland",
        country="New Zealand",
        continent=OC,
        hemisphere=S,
        languages=["English"],
        population=M1_5,
        climate=OCEAN,
        sea="harbours on the Pacific Ocean and the Tasman Sea",
        capital=False,
        landmarks=["the Sky Tower", "Rangitoto Island", "the Mount Eden volcano"],
        foods=["meat pies", "hangi earth-oven feasts", "pavlova"],
        sport="rugby union",
        known_for="sailing, dozens of volcanic cones and two harbours",
    ),
    _city(
        "Wellington",
        country="New Zealand",
        continent=OC,
        hemisphere=S,
        languages=["English"],
        population=U1,
        climate=OCEAN,
        sea="a harbour on Cook Strait, between the Tasman Sea and the Pacific Ocean",
        capital=True,
        landmarks=["the Te Papa museum", "the cable car", "the Beehive parliament building"],
        foods=["flat white coffee", "craft beer", "green-lipped mussels"],
        sport="rugby union",
        known_for=(
            "strong winds, a lively film industry and being the southernmost national capital"
        ),
    ),
    _city(
        "Suva",
        country="Fiji",
        continent=OC,
        hemisphere=S,
        languages=["English", "Fijian"],
        population=U1,
        climate=TROP,
        sea="the Pacific Ocean",
        capital=True,
        landmarks=["the Fiji Museum", "Thurston Gardens", "the Municipal Market"],
        foods=["kokoda raw fish salad", "lovo earth-oven feasts", "cassava"],
        sport="rugby union",
        known_for="being a hub of the South Pacific islands, its harbour and frequent rain",
    ),
]

KB: dict[str, dict] = dict(_CITIES)
TARGETS: list[str] = list(KB)


def names_of(target: str) -> list[str]:
    """The target's name followed by its variants (every phrase that counts as guessing it)."""
    return [target] + list(KB[target]["variants"])


def _check_target(target: str) -> None:
    if target not in KB:
        raise ValueError(f"unknown guess-my-city target {target!r}; valid targets: {TARGETS}")


def _names_in(target: str, text: str) -> bool:
    return any(mentions(text, n) for n in names_of(target))


def is_correct_guess(target: str, question: str) -> bool:
    """True iff ``question`` names ``target`` (or a variant) as whole words, case- and
    accent-insensitive, and names no other city: "Is the city you are from Lima?" wins Lima; "What
    is the climate like?" does not, and neither does "Is it Lima or Paris?" (listing cities is a
    reward hack, see envs/core.py)."""
    _check_target(target)
    return _names_in(target, question) and _other_city(target, normalize(question)) is None


# --------------------------------------------------------------------------------------------------
# Phrase tables: whole-word, longest-first matching over normalize(question). Each table maps a
# normalized phrase to a value.
def _norm(s: str) -> str:
    return normalize(s).strip()


def _alternation(phrases) -> re.Pattern:
    alts = sorted({p for p in phrases if p}, key=lambda p: (-len(p), p))
    return re.compile(r"(?<= )(?:" + "|".join(re.escape(p) for p in alts) + r")(?:s|es)?(?= )")


def _lookup(table: dict, matched: str):
    for cut in (0, 1, 2):
        key = matched[: len(matched) - cut] if cut else matched
        if key in table:
            return table[key]
    return None


# other cities: phrase -> canonical name
_CITY_PHRASES = {_norm(n): t for t in TARGETS for n in names_of(t)}
_CITY_RX = _alternation(_CITY_PHRASES)

# all the world's countries (so "Is your city in Norway?" gets an answer), plus aliases of KB
# countries
_WORLD_COUNTRIES = """Afghanistan Albania Algeria Andorra Angola Antigua_and_Barbuda Argentina
Armenia Australia Austria Azerbaijan Bahamas Bahrain Bangladesh Barbados Belarus Belgium Belize
Benin Bhutan Bolivia Bosnia_and_Herzegovina Botswana Brazil Brunei Bulgaria Burkina_Faso Burundi
Cambodia Cameroon Canada Cape_Verde Central_African_Republic Chad Chile China Colombia Comoros
Costa_Rica Croatia Cuba Cyprus Denmark Djibouti Dominica Dominican_Republic East_Timor Ecuador Egypt
El_Salvador Equatorial_Guinea Eritrea Estonia Eswatini Ethiopia Fiji Finland France Gabon Gambia
Georgia Germany Ghana Greece Grenada Guatemala Guinea Guinea_Bissau Guyana Haiti Honduras Hungary
Iceland India Indonesia Iran Iraq Ireland Israel Italy Ivory_Coast Jamaica Japan Jordan Kazakhstan
Kenya Kiribati Kosovo Kuwait Kyrgyzstan Laos Latvia Lebanon Lesotho Liberia Libya Liechtenstein
Lithuania Luxembourg Madagascar Malawi Malaysia Maldives Mali Malta Marshall_Islands Mauritania
Mauritius Mexico Micronesia Moldova Monaco Mongolia Montenegro Morocco Mozambique Myanmar Namibia
Nauru Nepal New_Zealand Nicaragua Niger Nigeria North_Korea North_Macedonia Norway Oman Pakistan
Palau Palestine Panama Papua_New_Guinea Paraguay Peru Poland Portugal Qatar Republic_of_the_Congo
Romania Russia Rwanda Saint_Lucia Samoa San_Marino Sao_Tome_and_Principe Saudi_Arabia Senegal Serbia
Seychelles Sierra_Leone Singapore Slovakia Slovenia Solomon_Islands Somalia South_Africa South_Korea
South_Sudan Spain Sri_Lanka Sudan Suriname Sweden Switzerland Syria Taiwan Tajikistan Tanzania
Thailand Togo Tonga Trinidad_and_Tobago Tunisia Turkey Turkmenistan Tuvalu Uganda Ukraine Uruguay
Uzbekistan Vanuatu Vatican Venezuela Vietnam Yemen Zambia Zimbabwe England Scotland Wales
Northern_Ireland""".split()
_COUNTRY_ALIASES = {
    "the United States": [
        "united states",
        "united states of america",
        "usa",
        "u s a",
        "the us",
        "the u s",
        "america",
        "the states",
    ],
    "the United Kingdom": [
        "united kingdom",
        "uk",
        "u k",
        "britain",
        "great britain",
        "england",
    ],  # the KB's only English city is London
    "the Netherlands": ["netherlands", "holland"],
    "the United Arab Emirates": ["united arab emirates", "uae", "u a e", "emirates"],
    "the Philippines": ["philippines"],
    "the Democratic Republic of the Congo": [
        "democratic republic of the congo",
        "dr congo",
        "drc",
        "congo",
    ],
    "the Czech Republic": ["czech republic", "czechia"],
    "South Korea": ["south korea", "korea", "republic of korea"],
    "Turkey": ["turkey", "turkiye"],
    "Iran": ["iran", "persia"],
    "Ivory Coast": ["ivory coast", "cote d ivoire"],
    "Myanmar": ["myanmar", "burma"],
}
_WITH_THE = {
    "Bahamas",
    "Central African Republic",
    "Comoros",
    "Dominican Republic",
    "Gambia",
    "Maldives",
    "Marshall Islands",
    "Republic of the Congo",
    "Seychelles",
    "Solomon Islands",
    "Vatican",
}
_COUNTRIES: dict[str, str] = {}
for _c in _WORLD_COUNTRIES:
    _c = _c.replace("_", " ")
    _COUNTRIES[_norm(_c)] = ("the " + _c) if _c in _WITH_THE else _c
for _canon, _aliases in _COUNTRY_ALIASES.items():
    for _a in _aliases:
        _COUNTRIES[_norm(_a)] = _canon

_CONTINENTS = {
    "europe": EU,
    "asia": AS,
    "africa": AF,
    "north america": NA,
    "south america": SA,
    "oceania": OC,
    "antarctica": "Antarctica",
    "americas": "the Americas",
}

_REGIONS = {
    "western europe": "Western Europe",
    "central europe": "Central Europe",
    "southern europe": "Southern Europe",
    "southeastern europe": "Southeastern Europe",
    "southeast europe": "Southeastern Europe",
    "eastern europe": "Eastern Europe",
    "northern europe": "Northern Europe",
    "east asia": "East Asia",
    "eastern asia": "East Asia",
    "far east": "East Asia",
    "southeast asia": "Southeast Asia",
    "south east asia": "Southeast Asia",
    "south asia": "South Asia",
    "southern asia": "South Asia",
    "indian subcontinent": "South Asia",
    "central asia": "Central Asia",
    "middle east": "the Middle East",
    "north africa": "North Africa",
    "northern africa": "North Africa",
    "west africa": "West Africa",
    "western africa": "West Africa",
    "east africa": "East Africa",
    "eastern africa": "East Africa",
    "central africa": "Central Africa",
    "southern africa": "Southern Africa",
    "latin america": "Latin America",
    "central america": "Central America",
    "caribbean": "the Caribbean",
    "australasia": "Australasia",
    "pacific islands": "the Pacific Islands",
    "scandinavia": "Scandinavia",
    "nordic countries": "the Nordic countries",
    "sub saharan africa": "sub-Saharan Africa",
    "balkans": "the Balkans",
    "nordic": "the Nordic countries",
}
# regions that overlap the "region" field, decided by country
_REGION_COUNTRIES = {
    "the Middle East": {
        "the United Arab Emirates",
        "Saudi Arabia",
        "Iran",
        "Iraq",
        "Qatar",
        "Egypt",
        "Turkey",
    },
    "Latin America": {
        "Mexico",
        "Cuba",
        "Brazil",
        "Argentina",
        "Peru",
        "Colombia",
        "Chile",
        "Ecuador",
        "Venezuela",
        "Uruguay",
    },
    "Scandinavia": {"Sweden", "Norway", "Denmark"},
    "the Nordic countries": {"Sweden", "Norway", "Denmark", "Finland"},
    "the Balkans": {"Greece", "Turkey"},
}

_LANGUAGES = {
    _norm(x): x
    for x in """English Spanish French Portuguese German Italian Dutch Flemish Russian Arabic
Mandarin Chinese Cantonese Japanese Korean Hindi Bengali Urdu Turkish Persian Farsi Thai Vietnamese
Indonesian Malay Tagalog Filipino Swahili Amharic Greek Polish Czech Slovak Hungarian Swedish
Norwegian Danish Finnish Icelandic Ukrainian Hebrew Marathi Kannada Tamil Telugu Gujarati Punjabi
Nepali Mongolian Kazakh Khmer Lao Burmese Sinhala Zulu Xhosa Afrikaans Yoruba Igbo Hausa Wolof
Lingala Luganda Twi Catalan Basque Quechua Irish Gaelic Fijian Maori Romanian Bulgarian Serbian
Croatian Albanian Berber Somali Uzbek Malayalam Latin Welsh Scottish""".split()
}
_LANGUAGES["mandarin chinese"] = "Mandarin Chinese"

_SPORTS = {
    _norm(x): x
    for x in [
        "football",
        "soccer",
        "American football",
        "Australian rules football",
        "Aussie rules",
        "Gaelic football",
        "rugby",
        "rugby union",
        "rugby league",
        "cricket",
        "baseball",
        "basketball",
        "ice hockey",
        "hockey",
        "tennis",
        "boxing",
        "Muay Thai",
        "kickboxing",
        "wrestling",
        "athletics",
        "track and field",
        "badminton",
        "skiing",
        "golf",
        "volleyball",
        "table tennis",
        "cycling",
        "sumo",
        "swimming",
        "surfing",
        "handball",
        "water polo",
        "polo",
        "horse racing",
        "motor racing",
        "formula one",
        "martial arts",
        "judo",
        "karate",
        "taekwondo",
        "lacrosse",
        "curling",
        "sailing",
        "rowing",
        "netball",
        "gymnastics",
        "fencing",
        "bullfighting",
    ]
}
_SPORT_SYNONYMS = {"aussie rules": "australian rules football", "track and field": "athletics"}

_SEAS = {
    _norm(x): x
    for x in [
        "the Atlantic Ocean",
        "the Pacific Ocean",
        "the Indian Ocean",
        "the Arctic Ocean",
        "the Southern Ocean",
        "the Mediterranean Sea",
        "the Baltic Sea",
        "the North Sea",
        "the Black Sea",
        "the Red Sea",
        "the Caribbean Sea",
        "the Arabian Sea",
        "the Persian Gulf",
        "the Gulf of Mexico",
        "the South China Sea",
        "the East China Sea",
        "the Yellow Sea",
        "the Sea of Japan",
        "the Aegean Sea",
        "the Adriatic Sea",
        "the Irish Sea",
        "the Tasman Sea",
        "the Gulf of Guinea",
        "the Bay of Bengal",
        "the Java Sea",
        "the Gulf of Thailand",
        "the Sea of Marmara",
        "the Bosphorus",
        "the Gulf of Finland",
        "the Korea Strait",
        "Cook Strait",
        "Bass Strait",
        "Puget Sound",
        "the Seto Inland Sea",
        "the English Channel",
        "the Caspian Sea",
        "the Coral Sea",
        "the Straits of Florida",
        "the River Plate estuary",
        "the Ionian Sea",
        "the Tyrrhenian Sea",
        "the Gulf of Aden",
        "the Bering Sea",
    ]
}
for _alias, _canon in [
    ("atlantic", "the Atlantic Ocean"),
    ("pacific", "the Pacific Ocean"),
    ("baltic", "the Baltic Sea"),
    ("adriatic", "the Adriatic Sea"),
    ("aegean", "the Aegean Sea"),
    ("on the mediterranean", "the Mediterranean Sea"),
    ("arabian gulf", "the Persian Gulf"),
    ("the gulf", "the Persian Gulf"),
    ("marmara", "the Sea of Marmara"),
    ("east sea", "the Sea of Japan"),
    ("bosporus", "the Bosphorus"),
]:
    _SEAS[_norm(_alias)] = _canon
# match without the leading article ("Is it on the Atlantic Ocean?"), except "the gulf" which needs
# it
_SEAS = {k[4:] if k.startswith("the ") and k != "the gulf" else k: v for k, v in _SEAS.items()}


_RISKY_RIVER_WORDS = {
    "red",
    "pearl",
    "swan",
    "charles",
    "han",
    "congo",
}  # too common alone to name a river


def _river_core(segment: str) -> str:
    """The canonical name of a river phrase: "the Moskva River" -> "moskva", "River Nile" ->
    "nile"."""
    k = _norm(segment)
    k = k[4:] if k.startswith("the ") else k
    if k.endswith(" river"):
        k = k[:-6]
    if k.startswith("river ") and k != "river plate":
        k = k[6:]
    return k


def _river_segments(river: str | None) -> list[str]:
    """The named rivers of a KB river field ("the Delaware and the Schuylkill" -> both)."""
    if not river or "same name" in river:
        return []
    parts = [p.strip() for p in re.split(r",| and ", river)]
    return [p for p in parts if p and not p.startswith(("now ", "near "))]


# river phrase -> (canonical core, display)
_RIVERS: dict[str, tuple[str, str]] = {}
for _t in TARGETS:
    for _seg in _river_segments(KB[_t]["river"]):
        _core = _river_core(_seg)
        _full = _norm(_seg)
        _full = _full[4:] if _full.startswith("the ") else _full
        _RIVERS.setdefault(_full, (_core, _seg))
        if _core.split()[-1] not in _RISKY_RIVER_WORDS:
            _RIVERS.setdefault(_core, (_core, _seg))
for _alias, _core in [
    ("amazon", "amazon"),
    ("rhine", "rhine"),
    ("ganges", "ganges"),
    ("yangtze", "yangtze"),
    ("volga", "volga"),
    ("mekong", "mekong"),
    ("euphrates", "euphrates"),
    ("zambezi", "zambezi"),
    ("orinoco", "orinoco"),
    ("indus", "indus"),
    ("elbe", "elbe"),
    ("loire", "loire"),
    ("rhone", "rhone"),
    ("ebro", "ebro"),
    ("douro", "douro"),
    ("dnieper", "dnipro"),
    ("saint lawrence", "st lawrence"),
    ("st lawrence river", "st lawrence"),
    ("river thames", "thames"),
    ("river nile", "nile"),
    ("la plata", "river plate"),
    ("plate river", "river plate"),
]:
    _RIVERS.setdefault(_alias, (_core, "the " + " ".join(w.capitalize() for w in _core.split())))


def _rivers_of(river: str | None) -> set[str]:
    """Canonical names of the rivers a KB river field names (anywhere in it: "..., near the mouth of
    the Yangtze")."""
    cores = {_river_core(seg) for seg in _river_segments(river)}
    if river:
        cores |= {core for key, (core, _) in _RIVERS.items() if mentions(river, key)}
    return cores


_CITY_RIVERS = {_t: _rivers_of(KB[_t]["river"]) for _t in TARGETS}


_GENERIC = {
    "the",
    "of",
    "and",
    "a",
    "an",
    "with",
    "its",
    "in",
    "on",
    "at",
    "old",
    "new",
    "royal",
    "national",
    "grand",
    "central",
    "great",
    "palace",
    "castle",
    "cathedral",
    "tower",
    "towers",
    "bridge",
    "museum",
    "park",
    "square",
    "market",
    "beach",
    "hall",
    "gate",
    "gardens",
    "garden",
    "street",
    "island",
    "temple",
    "fort",
    "mosque",
    "opera",
    "house",
    "harbour",
    "strip",
    "medina",
    "corniche",
    "city",
    "town",
    "district",
    "cricket",
    "ground",
    "lake",
    "monument",
    "memorial",
    "church",
    "building",
    "statue",
    "cable",
    "car",
    "cars",
    "art",
    "arts",
    "fine",
    "municipal",
    "theatre",
    "center",
    "centre",
    "mountain",
    "basilica",
    "obelisk",
    "parliament",
}


def _landmark_keys(landmark: str) -> list[str]:
    """A landmark can be asked about by name when it has a distinctive word ("Big Ben", "the Eiffel
    Tower"), not when it is generic ("the Royal Palace", "the Opera House")."""
    base = re.sub(r"\(.*?\)", "", landmark)
    words = re.findall(r"[A-Za-z][\w'-]*", base)
    if not any(w[0].isupper() and _norm(w) not in _GENERIC for w in words):
        return []
    k = _norm(base)
    k = k[4:] if k.startswith("the ") else k
    keys = [k]
    for inner in re.findall(r"\((.*?)\)", landmark):  # "(Kinkaku-ji)", "(Monas)"
        if inner[:1].isupper():
            keys.append(_norm(inner))
    return keys


# landmark phrase -> display
_LANDMARKS: dict[str, str] = {}
for _t in TARGETS:
    for _l in KB[_t]["landmarks"]:
        for _k in _landmark_keys(_l):
            _LANDMARKS.setdefault(_k, re.sub(r"\s*\(.*?\)", "", _l))
for _extra in [
    "the Great Wall",
    "the Great Wall of China",
    "the Taj Mahal",
    "Machu Picchu",
    "Petra",
    "Angkor Wat",
    "Stonehenge",
    "Niagara Falls",
    "the Grand Canyon",
    "Mount Fuji",
    "Mount Everest",
    "the Leaning Tower of Pisa",
    "the pyramids",
    "Tower Bridge",
    "Central Park",
    "the Kremlin",
    "the Louvre",
    "the Alhambra",
    "Table Mountain",
    "the Pentagon",
    "the White House",
    "Hollywood",
    "Copacabana",
    "Teotihuacan",
    "Carthage",
    "Tiananmen",
    "Notre-Dame",
]:
    _k = _norm(_extra)
    _LANDMARKS.setdefault(_k[4:] if _k.startswith("the ") else _k, _extra)


_PLURAL_LANDMARK_WORDS = {
    "pyramids",
    "gardens",
    "falls",
    "towers",
    "caves",
    "tombs",
    "steps",
    "cars",
}


def _has_landmark(city: dict, key: str) -> bool:
    return any(mentions(x, key) for x in city["landmarks"] + [city["known_for"]])


_FOOD_WORDS = [
    "pizza",
    "pasta",
    "sushi",
    "ramen",
    "tacos",
    "taco",
    "curry",
    "kebab",
    "noodles",
    "noodle",
    "dumplings",
    "dumpling",
    "rice",
    "seafood",
    "fish",
    "beer",
    "wine",
    "coffee",
    "tea",
    "chocolate",
    "cheese",
    "steak",
    "barbecue",
    "burgers",
    "burger",
    "hot dogs",
    "hot dog",
    "bagels",
    "croissants",
    "falafel",
    "hummus",
    "paella",
    "dim sum",
    "kimchi",
    "pho",
    "biryani",
    "empanadas",
    "arepas",
    "ceviche",
    "couscous",
    "tagine",
    "waffles",
    "pierogi",
    "borscht",
    "goulash",
    "schnitzel",
    "sausages",
    "sausage",
    "bread",
    "pies",
    "pie",
    "sandwiches",
    "sandwich",
    "soup",
    "salmon",
    "lobster",
    "crab",
    "oysters",
    "mussels",
    "herring",
    "sardines",
    "lamb",
    "pork",
    "duck",
    "chicken",
    "beef",
    "tofu",
    "pastries",
    "pastry",
    "doughnuts",
    "churros",
    "tamales",
    "dates",
    "baklava",
    "shawarma",
    "satay",
    "jollof rice",
    "pad thai",
    "fish and chips",
    "poutine",
    "gumbo",
    "cheesesteaks",
    "deep dish pizza",
    "dulce de leche",
    "clam chowder",
    "tapas",
    "risotto",
    "tiramisu",
    "stroopwafels",
    "sourdough bread",
    "bubble tea",
]
_FOODS: dict[str, str] = {}
for _t in TARGETS:
    for _f in KB[_t]["foods"]:
        _k = _norm(re.sub(r"\(.*?\)", "", _f))
        _k = _k[4:] if _k.startswith("the ") else _k
        _FOODS.setdefault(_k, _k)
for _f in _FOOD_WORDS:
    _FOODS.setdefault(_norm(_f), _norm(_f))

# one alternation over every entity kind, longest first; a phrase that is several kinds keeps the
# first
_ENTITY: dict[str, tuple[str, str]] = {}
for _kind, _table in [
    ("country", _COUNTRIES),
    ("continent", _CONTINENTS),
    ("region", _REGIONS),
    ("sea", _SEAS),
    ("landmark", _LANDMARKS),
    ("river", _RIVERS),
    ("language", _LANGUAGES),
    ("sport", _SPORTS),
    ("food", _FOODS),
]:
    for _p, _v in _table.items():  # landmarks and rivers keep their phrase (the key of their table)
        _ENTITY.setdefault(_p, (_kind, _p if _kind in ("landmark", "river") else _v))
_ENTITY_RX = _alternation(_ENTITY)


def _entities(nq: str) -> dict[str, list[str]]:
    """Entities named in the normalized question: kind -> values, in order, without repeats."""
    out: dict[str, list[str]] = {}
    for m in _ENTITY_RX.finditer(nq):
        hit = _lookup(_ENTITY, m.group(0))
        if hit is None:
            continue
        kind, value = hit
        if value not in out.setdefault(kind, []):
            out[kind].append(value)
    return out


# --------------------------------------------------------------------------------------------------
# The oracle.
_AUX = {
    "is",
    "are",
    "am",
    "was",
    "were",
    "does",
    "do",
    "did",
    "can",
    "could",
    "would",
    "will",
    "has",
    "have",
    "should",
    "isn",
    "aren",
    "doesn",
    "don",
}
_FILLER = re.compile(
    r"^ (?:(?:ok|okay|so|well|alright|hmm+|um+|and|next|now|great|thanks|thank you|good|"
    r"then|please|tell me)\s+)+"
)

_NAME_WORDS = {
    "spell",
    "spelled",
    "spelt",
    "spelling",
    "letter",
    "letters",
    "backwards",
    "backward",
    "reverse",
    "reversed",
    "anagram",
    "anagrams",
    "rhyme",
    "rhymes",
    "initial",
    "initials",
    "abbreviation",
    "abbreviate",
    "abbreviated",
    "acronym",
    "syllable",
    "syllables",
    "pronounce",
    "pronounced",
    "pronunciation",
    "nickname",
    "nicknames",
    "hometown",
    "vowel",
    "vowels",
    "consonant",
    "consonants",
    "characters",
}
_WEAK_NAME_WORDS = {"name", "names", "named", "called", "call", "translate", "translation"}
_NAME_RX = re.compile(
    r" (?:name of (?:your|the|this|that|my|yo) (?:city|town|hometown)(?! s )"
    r"|(?:city|town) s name|(?:city|town) name|what city|which city|what town|which town"
    r"|city (?:are|do|did) you (?:from|live|come)|where are you from"
    r"|where do you (?:live|come from)"
    r"|where you are from|where you live|who are you) "
)


def _sentence(s: str) -> str:
    return s[:1].upper() + s[1:]


def _join(items: list[str]) -> str:
    if len(items) <= 1:
        return "".join(items)
    if len(items) == 2:
        return f"{items[0]} and {items[1]}"
    return ", ".join(items[:-1]) + f", and {items[-1]}"


def _climate_text(climate: str) -> str:
    return f"{'an' if climate[0] in 'aeiou' else 'a'} {climate} climate"


def _pop_text(band: str) -> str:
    return f"a population of {band} people"


def _in_region(city: dict, region: str) -> bool:
    if region in _REGION_COUNTRIES:
        return city["country"] in _REGION_COUNTRIES[region]
    if region == "sub-Saharan Africa":
        return city["continent"] == AF and city["region"] != "North Africa"
    return city["region"] == region


def _in_continent(city: dict, continent: str) -> bool:
    if continent == "the Americas":
        return city["continent"] in (NA, SA)
    return city["continent"] == continent


def _language_yes(city: dict, lang: str) -> bool:
    return any(mentions(x, lang) for x in city["languages"])


def _languages_sentence(city: dict) -> str:
    langs = city["languages"]
    if len(langs) == 1:
        return f"The predominant language spoken is {langs[0]}."
    return f"The predominant languages spoken are {_join(langs)}."


_CLIMATE_WORDS = {
    "tropical": {TROP},
    "tropics": {TROP},
    "arid": {ARID},
    "semi arid": {ARID},
    "desert": {ARID},
    "dry": {ARID},
    "mediterranean": {MED},
    "subtropical": {HSUB, HIGH},
    "humid subtropical": {HSUB},
    "temperate": {OCEAN, MED, HSUB, HIGH},
    "oceanic": {OCEAN},
    "maritime": {OCEAN},
    "continental": {CONT, SUBARC},
    "subarctic": {SUBARC},
    "arctic": {SUBARC},
    "polar": {SUBARC},
    "highland": {HIGH},
    "humid": {TROP, HSUB, CONT},
    "cold": {CONT, SUBARC},
    "freezing": {CONT, SUBARC},
    "snow": {CONT, SUBARC},
    "snowy": {CONT, SUBARC},
    "hot": {TROP, ARID},
    "warm": {TROP, ARID, HSUB, MED},
    "mild": {OCEAN, MED, HIGH},
}
_CLIMATE_RX = _alternation(_CLIMATE_WORDS)

_NUM = {
    "one": 1,
    "a": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "fifteen": 15,
    "twenty": 20,
}
_SIZE_RX = re.compile(
    r" (more|over|greater|bigger|larger|above|at least|less|under|fewer|smaller|below)"
    r"(?: than)? (\d+(?: \d+)?|one|a|two|three|four|five|six|seven|eight|nine|ten|fifteen|twenty)"
    r" million "
)


def _has(nq: str, *phrases: str) -> bool:
    return any((" " + p + " ") in nq for p in phrases)


def _words(nq: str) -> set[str]:
    return set(nq.split())


def _size_answer(city: dict, nq: str) -> str | None:
    band = city["population"]
    lo, hi = _BAND_RANGE[band]
    m = _SIZE_RX.search(nq)
    if m:
        raw = m.group(2)
        n = float(raw.replace(" ", ".")) if raw[0].isdigit() else float(_NUM[raw])
        more = m.group(1) in {"more", "over", "greater", "bigger", "larger", "above", "at least"}
        yes = (lo >= n) if more else (hi <= n)
        no = (hi <= n) if more else (lo >= n)
        if yes:
            return f"Yes, it has {_pop_text(band)}."
        if no:
            return f"No, it has {_pop_text(band)}."
        return f"My city has {_pop_text(band)}."
    w = _words(nq)
    if w & {"megacity", "megacities", "megalopolis"}:
        return f"{'Yes' if band == O10 else 'No'}, it has {_pop_text(band)}."
    if w & {"big", "large", "huge", "populous", "major", "metropolis", "crowded"}:
        return f"{'Yes' if band != U1 else 'No'}, it has {_pop_text(band)}."
    if w & {"small", "tiny", "little"}:
        return f"{'Yes' if band == U1 else 'No'}, it has {_pop_text(band)}."
    return None


_COAST_WORDS = {
    "coast",
    "coastal",
    "coastline",
    "ocean",
    "sea",
    "seaside",
    "beach",
    "beaches",
    "port",
    "harbour",
    "harbor",
    "seaport",
    "shore",
}
_INLAND_WORDS = {"inland", "landlocked"}


def _yes_no(target: str, nq: str, ents: dict[str, list[str]]) -> str | None:
    """Answer a yes/no question, or None when it asks about nothing the KB knows."""
    city = KB[target]
    w = _words(nq)
    country = city["country"]
    if w & {"capital", "capitals"}:
        if ents.get("country"):
            asked = ents["country"][0]
            if city["capital"] and asked == country:
                return f"Yes, it is the capital of {asked}."
            return f"No, it is not the capital of {asked}."
        if city["capital"]:
            return f"Yes, it is the capital of {country}."
        return "No, it is not the capital of its country."
    if ents.get("landmark"):
        key = ents["landmark"][0]
        display = _LANDMARKS[key]
        verb = "are" if _words(_norm(display)) & _PLURAL_LANDMARK_WORDS else "is"
        if _has_landmark(city, key):
            return _sentence(f"Yes, {display} {verb} in my city.")
        return _sentence(f"No, {display} {verb} not in my city.")
    if ents.get("sea"):
        sea = ents["sea"][0]
        if city["sea"] and mentions(city["sea"], sea):
            return f"Yes, it lies on {sea}."
        return f"No, it does not lie on {sea}."
    for kind, test in [
        ("region", _in_region),
        ("continent", _in_continent),
        ("country", lambda c, v: c["country"] == v),
    ]:
        vals = ents.get(kind)
        if not vals:
            continue
        if len(vals) > 1:  # "Is it in Europe or Asia?"
            return _free(city, kind)
        if test(city, vals[0]):
            return f"Yes, it is in {vals[0]}."
        return f"No, it is not in {vals[0]}."
    if ents.get("language"):
        vals = ents["language"]
        if len(vals) > 1:
            return _languages_sentence(city)
        lang = vals[0]
        if _language_yes(city, lang):
            if len(city["languages"]) == 1:
                return f"Yes, {lang} is the predominant language."
            return f"Yes, {lang} is one of the predominant languages."
        return f"No, the predominant language is not {lang}."
    if ents.get("river"):
        core, display = _RIVERS[ents["river"][0]]
        if core in _CITY_RIVERS[target]:
            return f"Yes, it lies on {display}."
        return f"No, it does not lie on {display}."
    if _has(
        nq, "eastern hemisphere", "western hemisphere", "east of greenwich", "west of greenwich"
    ):
        return FALLBACK
    for phrases, hemi in [
        (("northern hemisphere", "north of the equator"), N),
        (("southern hemisphere", "south of the equator"), S),
    ]:
        if _has(nq, *phrases):
            if city["hemisphere"] == hemi:
                return f"Yes, it is in the {hemi} hemisphere."
            return f"No, it is not in the {hemi} hemisphere."
    if ents.get("food"):
        f = ents["food"][0]
        if any(mentions(x, f) for x in city["foods"]):
            return f"Yes, {f} is a popular local food."
        return f"No, {f} is not among its best-known local foods."
    if ents.get("sport"):
        sport = ents["sport"][0].lower()
        sport = _SPORT_SYNONYMS.get(sport, sport)
        if mentions(city["sport"], sport):
            return f"Yes, {city['sport']} is the most popular sport there."
        return f"No, the most popular sport there is {city['sport']}."
    m = _CLIMATE_RX.search(nq)
    if m and not (w & _COAST_WORDS and m.group(0) == "mediterranean"):
        kinds = _lookup(_CLIMATE_WORDS, m.group(0))
        clim = city["climate"]
        return f"{'Yes' if clim in kinds else 'No'}, it has {_climate_text(clim)}."
    size = _size_answer(city, nq)
    if size:
        return size
    if w & _INLAND_WORDS:
        return "Yes, it is inland." if not city["coastal"] else "No, it is on the coast."
    if w & _COAST_WORDS:
        return "Yes, it is on the coast." if city["coastal"] else "No, it is not on the coast."
    if w & {"river", "rivers"}:
        if city["river"]:
            return f"Yes, it lies on {city['river']}."
        return "No, no major river flows through it."
    if w & {"earth", "planet"}:
        return "Yes, it is on Earth."
    if _has(nq, "real city", "real place", "a city", "actual city", "a real", "exist"):
        return "Yes, it is a real city."
    return None


def _free(city: dict, kind: str) -> str:
    if kind == "language":
        return _languages_sentence(city)
    if kind == "continent":
        return f"My city is in {city['continent']}."
    if kind == "region":
        return f"My city is in {city['region']}."
    if kind == "country":
        return f"My city is in {city['country']}."
    if kind == "location":
        return f"My city is in {city['country']}, in {city['region']}."
    if kind == "hemisphere":
        return f"My city is in the {city['hemisphere']} hemisphere."
    if kind == "coast":
        return (
            f"My city lies on {city['sea']}."
            if city["coastal"]
            else "My city is inland, not on the coast."
        )
    if kind == "river":
        return (
            f"My city lies on {city['river']}."
            if city["river"]
            else "No major river flows through my city."
        )
    if kind == "population":
        return f"My city has {_pop_text(city['population'])}."
    if kind == "climate":
        return f"My city has {_climate_text(city['climate'])}."
    if kind == "landmarks":
        return _sentence(f"Famous landmarks include {_join(city['landmarks'])}.")
    if kind == "food":
        return _sentence(f"Popular local foods include {_join(city['foods'])}.")
    if kind == "sport":
        return f"The most popular sport is {city['sport']}."
    if kind == "known_for":
        return f"My city is known for {city['known_for']}."
    raise KeyError(kind)


# free-form intents, tried in order: (kind, single words, phrases)
_INTENTS = [
    ("river", {"river", "rivers"}, ()),
    ("coast", _COAST_WORDS | _INLAND_WORDS | {"seas", "oceans", "water"}, ()),
    (
        "landmarks",
        {
            "landmark",
            "landmarks",
            "monument",
            "monuments",
            "sights",
            "sightseeing",
            "attraction",
            "attractions",
            "tourist",
            "tourists",
            "visit",
            "visitors",
            "building",
            "buildings",
            "architecture",
            "museum",
            "museums",
        },
        ("places to see",),
    ),
    (
        "food",
        {
            "food",
            "foods",
            "dish",
            "dishes",
            "cuisine",
            "eat",
            "eaten",
            "eating",
            "meal",
            "meals",
            "delicacy",
            "delicacies",
            "snack",
            "snacks",
            "dessert",
            "desserts",
            "specialty",
            "specialties",
        },
        (),
    ),
    ("sport", {"sport", "sports", "team", "teams", "athletes"}, ()),
    (
        "language",
        {"language", "languages", "speak", "speaks", "spoken", "tongue", "dialect", "dialects"},
        (),
    ),
    ("hemisphere", {"hemisphere", "equator"}, ()),
    ("continent", {"continent", "continents"}, ()),
    ("region", {"region", "subregion"}, ("part of the world",)),
    ("country", {"country", "countries", "nation", "nationality"}, ()),
    (
        "location",
        {"located", "location", "situated"},
        ("where is", "where s", "where in the world"),
    ),
    (
        "population",
        {
            "population",
            "populous",
            "inhabitants",
            "residents",
            "size",
            "megacity",
            "million",
            "millions",
        },
        ("how many people", "how big", "how large", "how many live"),
    ),
    (
        "climate",
        {
            "climate",
            "weather",
            "temperature",
            "temperatures",
            "season",
            "seasons",
            "rain",
            "rainy",
            "rainfall",
            "snow",
            "winter",
            "winters",
            "summer",
            "summers",
            "hot",
            "cold",
            "warm",
            "humid",
            "sunny",
        },
        (),
    ),
    (
        "known_for",
        {
            "known",
            "famous",
            "special",
            "unique",
            "describe",
            "description",
            "history",
            "culture",
            "economy",
            "industry",
        },
        ("tell me about", "what is it like", "what s it like", "about your city"),
    ),
]


def _free_form(city: dict, nq: str, target: str) -> str | None:
    w = _words(nq)
    if w & {"capital", "capitals"}:
        asks_for_capital = nq.split()[0] in {"what", "which", "who", "name", "whats"} or (
            re.search(r" capital (?:city )?(?:of|in) ", nq) is not None
            and bool(w & {"country", "nation"} or _entities(nq).get("country"))
        )
        if (
            asks_for_capital
        ):  # "What is the capital of your country?": the honest answer may name the city
            asked = (_entities(nq).get("country") or [city["country"]])[0]
            if city["capital"] and asked == city["country"]:
                return f"The capital of {asked} is {target}."
            return f"My city is not the capital of {asked}."
        if city["capital"]:
            return f"Yes, it is the capital of {city['country']}."
        return "No, it is not the capital of its country."
    if w & {"hemisphere"} and _has(
        nq, "eastern hemisphere", "western hemisphere", "eastern or western", "western or eastern"
    ):
        return FALLBACK
    for kind, words, phrases in _INTENTS:
        if w & words or (phrases and _has(nq, *phrases)):
            return _free(city, kind)
    return None


def _other_city(target: str, nq: str) -> str | None:
    for m in _CITY_RX.finditer(nq):
        other = _lookup(_CITY_PHRASES, m.group(0))
        if other is not None and other != target:
            return other
    return None


def _respond(target: str, question: str) -> str:
    city = KB[target]
    nq = _FILLER.sub(" ", normalize(question))
    if not nq.strip():
        return FALLBACK
    other = _other_city(target, nq)
    if other is not None:
        return f"No, I am not from {other}."
    w = _words(nq)
    if w & _NAME_WORDS or _NAME_RX.search(nq):
        return CANNOT
    ents = _entities(nq)
    first = nq.split()[0]
    if first in _AUX:
        reply = _yes_no(target, nq, ents)
        if reply:
            return reply
    reply = _free_form(city, nq, target)
    if reply:
        return reply
    if ents and first not in _AUX:  # "In Europe?", "Your city is in Asia?"
        reply = _yes_no(target, nq, ents)
        if reply:
            return reply
    if w & _WEAK_NAME_WORDS:  # "What is its name?", "What is your city called?"
        return CANNOT
    return FALLBACK


def answer(target: str, question: str) -> str:
    """The knowledge-base oracle: one sentence that never contains the secret city's name."""
    _check_target(target)
    if is_correct_guess(target, question):
        return WIN_REPLY
    reply = _respond(target, question)
    if _names_in(target, reply):  # anti-reward-hacking (ArCHer App. A)
        return CANNOT
    return reply


# --------------------------------------------------------------------------------------------------
# Question banks (for the scripted questioner and the tokenizer corpus).
USEFUL_QUESTIONS: list[str] = [
    "What is the predominant language spoken in your city?",
    "What continent is your city in?",
    "What country is your city in?",
    "Which region of the world is your city in?",
    "Where is your city located?",
    "Which hemisphere is your city in?",
    "Is your city on the coast?",
    "Which sea or ocean is your city on?",
    "Does a river flow through your city?",
    "Is your city the capital of its country?",
    "How many people live in your city?",
    "What is the climate like in your city?",
    "What are the famous landmarks in your city?",
    "What foods is your city famous for?",
    "What is the most popular sport in your city?",
    "What is your city known for?",
    "Is your city in Europe?",
    "Is your city in Asia?",
    "Is your city in Africa?",
    "Is your city in North America?",
    "Is your city in South America?",
    "Is your city in Oceania?",
    "Is your city in the southern hemisphere?",
    "Is English the predominant language?",
    "Is Spanish spoken in your city?",
    "Is Arabic the main language in your city?",
    "Is your city in the United States?",
    "Is your city in China?",
    "Is your city in the Middle East?",
    "Is your city in Latin America?",
    "Does your city have a tropical climate?",
    "Is your city cold in winter?",
    "Does your city have more than 5 million people?",
    "Is your city a megacity?",
    "Is football the most popular sport in your city?",
    "Is cricket popular in your city?",
    "Is your city inland?",
]

# The scripted questioner asks these first, in a random order, until one is answered "Yes, ...".
CATEGORY_QUESTIONS: list[str] = [
    "Is your city in Europe?",
    "Is your city in Asia?",
    "Is your city in Africa?",
    "Is your city in North America?",
    "Is your city in South America?",
    "Is your city in Oceania?",
]

# ... then these, in this order, until one candidate is left (country, then landmarks): a habit a
# small model can imitate. With random useful questions instead, each guess follows a different mix
# of answers, and a tiny model's BC start won 0.02 of games (docs/benchmark.md, "Guess My City").
HABIT_QUESTIONS: list[str] = [
    "What country is your city in?",
    "What are the famous landmarks in your city?",
]

USELESS_QUESTIONS: list[str] = [
    "Do you like your city?",
    "What is your favourite color?",
    "Is your city on Earth?",
    "Is your city a real place?",
    "How are you today?",
    "Do you have any pets?",
    "Can you give me a hint?",
    "Are you a person?",
    "What time is it?",
    "Is your city nice to live in?",
    "Do you enjoy this game?",
]


_GUESS_TEMPLATES = [
    "Is the city you are from {n}?",
    "Is your city {n}?",
    "Are you from {n}?",
    "My guess is {n}. Is that your city?",
]


def guess_question(target: str, rng: random.Random) -> str:
    """A natural question that guesses ``target`` (and so wins when it is the secret)."""
    _check_target(target)
    return rng.choice(_GUESS_TEMPLATES).format(n=target)


# --------------------------------------------------------------------------------------------------
# Optional LLM oracle. This follows the reference (LMRL-Gym Guess My City) setup's idea -- the
# oracle model plays someone from the hidden city and answers the guesser's question without naming
# the city; the wording is ours.
def llm_prompt(target: str, question: str) -> str:
    _check_target(target)
    city = KB[target]
    return (
        f"You are a person who lives in {target}, a city in {city['country']}. Another player is "
        "trying to guess which city you are from by asking you questions. Answer the question "
        "truthfully in one short sentence, as someone from your city would. Never say, spell, "
        "abbreviate or give letters of the name of your city. If the question asks for the name of "
        "your city, reply: "
        f'"{CANNOT}"\nQuestion: {question}\nAnswer:'
    )


def llm_postprocess(target: str, question: str, raw: str) -> str:
    """Map an LLM oracle's raw reply to the game's answer: a correct guess gets ``WIN_REPLY``
    whatever the model said; otherwise the first line of the reply, stripped, unless it names the
    city (then ``CANNOT``) or is empty (then ``FALLBACK``)."""
    _check_target(target)
    if is_correct_guess(target, question):
        return WIN_REPLY
    text = (raw or "").strip()
    line = text.splitlines()[0].strip() if text else ""
    if not line:
        return FALLBACK
    if _names_in(target, line):
        return CANNOT
    return line


def make(targets=None, max_turns: int = 20, oracle: str = "kb") -> QuestionGame:
    """The Guess My City env (name "guess_my_city") over ``targets`` (default: all 100 cities)."""
    if oracle != "kb":
        if isinstance(oracle, str) and oracle.startswith("hf:") and len(oracle) > 3:
            raise NotImplementedError(
                "the LLM oracle is built by envs.make(name, oracle='hf:...') in envs/__init__.py"
            )
        raise ValueError(f"oracle must be 'kb' or 'hf:<model id or path>', got {oracle!r}")
    if isinstance(targets, str):
        targets = [targets]
    targets = list(TARGETS if targets is None else targets)
    bad = [t for t in targets if t not in KB]
    if bad:
        raise ValueError(f"unknown guess-my-city target(s) {bad}; valid targets: {TARGETS}")
    return QuestionGame("guess_my_city", targets, answer, is_correct_guess, max_turns=max_turns)
