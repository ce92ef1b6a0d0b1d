"""The charts' colours, line styles and markers: safe for colour-blind readers and told apart in
greyscale, with contrast checked (WCAG 2.1: 4.5:1 for text, 3:1 for lines and marks).

Hues are from Okabe and Ito's palette ("Color Universal Design", 2008), the usual choice for
readers with deuteranopia or protanopia. The line and mark colours sit between the light and the
dark theme's backgrounds in luminance, so each keeps 3:1 against both. Hue is never the only cue:
a chart's series also differ in line style (SERIES_DASH) and marker (SERIES_MARKER), and their
legend or table names them. Text in a chart uses INK (the theme's) or one of TEXT_ON_LIGHT.

    from widgets.palette import SERIES, SERIES_DASH, SERIES_MARKER
    fig.line(..., color=SERIES[0], line_dash=SERIES_DASH[0])
"""

from __future__ import annotations

# Okabe-Ito, in the order a chart takes them: blue, vermillion, bluish green, reddish purple.
BLUE = "#0077BB"  # Okabe-Ito's #0072B2 a shade lighter: 3:1 on the dark theme too
VERMILLION = "#D55E00"
GREEN = "#009E73"
PURPLE = "#CC79A7"
GREY = "#7A7A7A"  # a reference line (a floor, the offered load), never a measured series

SERIES = (BLUE, VERMILLION, GREEN, PURPLE)
SERIES_DASH = ("solid", "dashed", "dotdash", "dotted")
SERIES_MARKER = ("circle", "square", "triangle", "diamond")

# Phases of a request's time, as filled bars: told apart by lightness too (yellow, purple, blue)
PHASE_FILL = {"queued": "#F0E442", "prefill": "#CC79A7", "decode": BLUE, "waiting": "#D5DDE5"}
# Fills that INK text sits on (KV blocks): light Okabe-Ito and ColorBrewer tints, >= 4.5:1 with INK
LABELLED_FILL = ("#56B4E9", "#E69F00", "#CC79A7", "#F0E442", "#7FD4B9", "#F4A582", "#B2ABD2",
                 "#BBBBBB")
FREE_FILL = "#E8ECF0"
OUTLINE = "#5B6673"

INK = "#1D2733"  # text on the light background
TEXT_ON_LIGHT = {"blue": "#005A8C", "vermillion": "#A84A00", "green": "#00704F",
                 "purple": "#8E4A74", "grey": "#5B6673"}

LIGHT_BACKGROUND = "#FFFFFF"
DARK_BACKGROUND = "#212529"  # Bootstrap's dark body, what Panel's dark theme draws charts on


def relative_luminance(hex_colour: str) -> float:
    """WCAG 2.1's relative luminance of an sRGB colour '#rrggbb'."""
    h = hex_colour.lstrip("#")
    channels = [int(h[i:i + 2], 16) / 255 for i in (0, 2, 4)]
    linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def contrast_ratio(a: str, b: str) -> float:
    """WCAG 2.1's contrast ratio of two colours, 1 to 21."""
    hi, lo = sorted((relative_luminance(a), relative_luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)
