use retry_toolkit::tool;

struct Forecast;

#[tool(effect = "read")]
async fn lookup(city: String) -> Result<Forecast, String> {
    let _ = city;
    Ok(Forecast)
}

fn main() {}
