"""The script ``streamlit run`` executes (``lyra-simpy explore`` starts it): the page
itself lives in :mod:`lyra_simpy.explore.page`, an ordinary module."""

from lyra_simpy.explore.page import main

main()
