{
  # XCE as a Nix flake: the package, `nix run` for the CLI, and a NixOS module with the
  # controller and worker services. It has not been built here (no binary cache is reachable
  # from the development machines); CI only checks that it parses.
  description = "XCE: batch scheduler and cluster manager for on-premises HPC clusters";

  inputs.nixpkgs.url = "github:NixOS/nixpkgs/nixos-24.05";

  outputs = { self, nixpkgs }:
    let
      systems = [ "x86_64-linux" "aarch64-linux" ];
      forAll = f: nixpkgs.lib.genAttrs systems (system: f nixpkgs.legacyPackages.${system});
    in {
      packages = forAll (pkgs: {
        default = pkgs.python311Packages.buildPythonApplication {
          pname = "xce";
          version = "0.2.0";  # keep equal to xce.__version__
          pyproject = true;
          src = ./.;
          build-system = [ pkgs.python311Packages.setuptools pkgs.python311Packages.wheel ];
          dependencies = with pkgs.python311Packages; [
            textual typer aiohttp pycapnp pyjwt ldap3 python-pam authlib psutil cryptography
            prometheus-client nvidia-ml-py msgspec
          ];
          doCheck = false;
        };
      });

      apps = forAll (pkgs: {
        default = {
          type = "app";
          program = "${self.packages.${pkgs.system}.default}/bin/xce";
        };
      });

      # The systemd units are xce/setup/units/*.service, the same files `xce init` renders:
      # here their @xce@, @config@ and @state@ placeholders are filled in with Nix store paths
      # and the module enables the ones asked for (`systemd.packages` + wantedBy).
      nixosModules.default = { config, lib, pkgs, ... }:
        let
          cfg = config.services.xce;
          xce = self.packages.${pkgs.system}.default;
          units = pkgs.runCommand "xce-systemd-units" { } ''
            mkdir -p $out/lib/systemd/system
            for unit in ${./xce/setup/units}/*.service; do
              substitute "$unit" "$out/lib/systemd/system/$(basename "$unit")" \
                --subst-var-by xce "${xce}/bin/xce" \
                --subst-var-by config "${cfg.configFile}" \
                --subst-var-by state "${cfg.stateDir}"
            done
          '';
          enable = name: {
            systemd.services.${name}.wantedBy = [ "multi-user.target" ];
          };
        in {
          options.services.xce = {
            controller.enable = lib.mkEnableOption "the XCE controller";
            standby.enable = lib.mkEnableOption "an XCE standby controller";
            worker.enable = lib.mkEnableOption "the XCE worker";
            configFile = lib.mkOption {
              type = lib.types.path;
              description = "The cluster config (TOML), e.g. written by `xce init`.";
            };
            stateDir = lib.mkOption {
              type = lib.types.str;
              default = "/var/lib/xce";
              description = "The cluster directory the controller may write (its state_dir lives below).";
            };
          };
          config = lib.mkIf (cfg.controller.enable || cfg.standby.enable || cfg.worker.enable)
            (lib.mkMerge [
              { systemd.packages = [ units ]; environment.systemPackages = [ xce ]; }
              (lib.mkIf cfg.controller.enable (enable "xce-controller"))
              (lib.mkIf cfg.standby.enable (enable "xce-standby"))
              (lib.mkIf cfg.worker.enable (enable "xce-worker"))
            ]);
        };
    };
}
