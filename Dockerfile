# priogate webhook image: docker build -t priogate:0.1.0 .
FROM python:3.11-slim
WORKDIR /app
COPY requirements.txt .
RUN pip install --no-cache-dir -r requirements.txt
COPY priogate/ priogate/
COPY webhook/ webhook/
COPY controller/ controller/
COPY certs/ certs/
ENV PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
USER 65532
ENTRYPOINT []
CMD ["python", "-m", "webhook"]
