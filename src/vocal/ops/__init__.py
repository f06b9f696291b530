"""Operations: doctor, setup (onboarding), teardown and warm-up."""
