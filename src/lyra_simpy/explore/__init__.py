"""The local explorer app (``lyra-simpy explore``): data, the Streamlit page, the launcher."""
