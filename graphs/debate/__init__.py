"""debate: two debaters answer a question and argue over rounds; a judge picks the winner."""
